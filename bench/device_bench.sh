#!/usr/bin/env bash
# One device-tool call's worth of benchmarking: judge the corpus (resuming what earlier calls
# finished, carried in out/bench), stop cleanly before the call's limit, and pack the results
# into $OUT/bench.tgz.  Usage: bench/device_bench.sh SECONDS [torchweld bench options...]
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD MAX_JOBS=16 PYTHONUNBUFFERED=1
limit=${1:-500}
shift || true
# A new machine has cold caches: warm again what is left (judged results keep their cold times).
rm -rf out/bench/corpus/prewarm
# SIGINT: the bench stops its workers, keeps finished results and writes a partial report.
timeout -s INT -k 30 "$limit" python3 -m torchweld bench problems --compile --prewarm 16 \
    --out out/bench/corpus "$@" 2>&1 | grep -v "^\s*$" | tail -n 60
python3 -m torchweld bench --report-only out/bench/corpus 2>&1 | tail -n 3
tar czf "${OUT:-/tmp}/bench.tgz" --exclude='*/candidates/*' --exclude='*/logs/*' out/bench/corpus
cp out/bench/corpus/summary.md "${OUT:-/tmp}/" 2>/dev/null || true
