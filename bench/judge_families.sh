#!/usr/bin/env bash
# Judge some corpus categories in one resumable `torchweld bench` run (one device call's worth at a
# time: call it again, with out/bench carried, to go on). Usage:
#   bench/judge_families.sh NAME SECONDS CATEGORY... [-- torchweld bench options]
# Results: out/bench/NAME (report.html, summary.md, results.json); packed into $OUT/NAME.tgz.
# NOTE: to resume on the next call, unpack that tgz here first (`tar xzf .../NAME.tgz` in the repo
# root) and carry out/bench: the device machine keeps nothing between calls. A changed compiler
# gives new candidate files, which the bench judges again.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD MAX_JOBS=16 PYTHONUNBUFFERED=1
name=$1 limit=$2
shift 2
cats=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do cats+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
src=out/bench/$name-problems
mkdir -p "$src"
for c in "${cats[@]}"; do cp -r "problems/$c" "$src/"; done
rm -rf "out/bench/$name/prewarm"  # a new machine has cold caches: warm what is left
timeout -s INT -k 30 "$limit" python3 -m torchweld bench "$src" --compile --prewarm 16 --out "out/bench/$name" "$@" \
    2>&1 | grep -v "^\s*$" | tail -n 80
python3 -m torchweld bench --report-only "out/bench/$name" 2>&1 | tail -n 3
tar czf "${OUT:-/tmp}/$name.tgz" --exclude='*/candidates/*' --exclude='*/logs/*' "out/bench/$name"
