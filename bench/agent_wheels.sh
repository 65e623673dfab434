#!/usr/bin/env bash
# The `openai` client and what it needs, as wheels for the device machine (its image lacks openai; docs: the device
# tool's README, "a Python package missing there"). Run here, in the repo root, before a device call that runs
# bench/agent_e2e.py; name .whl in the call's carry and start its command with
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >> .git/info/exclude
rm -rf .whl && mkdir .whl
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d .whl \
    "openai==$(python3 -c 'import openai; print(openai.__version__)')"
du -sh .whl && ls .whl
