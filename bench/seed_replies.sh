#!/usr/bin/env bash
# Seeds 000, 001, 004: the seed documents' own replies and torchweld's ModelNew, judged in one run
# on the same GPU. The replies' extensions, slow to build, are built in parallel first.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD MAX_JOBS=16 PYTHONUNBUFFERED=1
replies=out/seed_replies/seeds
mkdir -p "$replies"
for pair in 000:seed000_convt3d_bias_residual 001:seed001_conv2d_relu_bias 004:seed004_convt2d_bias_clamp_scale; do
    cp tests/fixtures/judge/seeds/${pair%%:*}_*.txt "$replies/${pair##*:}.txt"
done
python3 - "$replies" <<'PY'
import subprocess, sys, tempfile
from pathlib import Path
from torchweld.judge.extract import load_candidate
procs = []
for reply in sorted(Path(sys.argv[1]).glob("*.txt")):
    code = Path(tempfile.mkdtemp()) / "reply.py"
    code.write_text(load_candidate(reply).source)
    procs.append(subprocess.Popen([sys.executable, "-c", f"import runpy; runpy.run_path({str(code)!r})"]))
print("prebuilt replies:", [p.wait() for p in procs], flush=True)
PY
opts=(--set timing_min_s=0.5 --set generalize=false --filter 'seed00[014]*')
python3 -m torchweld bench problems --candidates out/seed_replies --out out/bench/seed_replies "${opts[@]}" 2>&1 | grep "^\[\|problems:"
python3 -m torchweld bench problems --compile --prewarm 3 --out out/bench/seed_ours "${opts[@]}" 2>&1 | grep "^\[\|problems:"
for d in seed_replies seed_ours; do cp out/bench/$d/summary.md "${OUT:-/tmp}/$d.md" 2>/dev/null; done
