#!/usr/bin/env bash
# What no GPU has run yet (session 7 had none), one device-tool call per step, each under its 10 minutes,
# logs under $OUT. Usage: bench/gpu_pending.sh STEP   (no STEP: list the steps, in the order to run them)
#   judge      the judge's process boundary: CUDA IPC in the sandbox, work attribution, overhead (issue 18)
#   corpus F   the corpus GPU test for family F (models, recurrent, conv, ...): every problem against eager
#   dropin     training parity, batch sizes 1 / captured / 3x, torchweld.compile on inline modules (issue 16)
#   gemm       our GEMM: GPU tests, then bench/gemm.py (issue 13; docs/gemm.md says what it must show)
#   conv       our convolution: GPU tests, then bench/conv.py (issue 14; docs/conv.md)
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
out=${OUT:-/tmp/gpu_pending}
mkdir -p "$out"
step=${1:-}
run() {  # name, seconds, command...
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit} s)"
    timeout -k 20 "$limit" "$@" > "$out/$name.log" 2>&1
    echo "exit $?"
    tail -n 25 "$out/$name.log"
}
case "$step" in
    judge) run judge 560 python3 -m pytest -q -m gpu tests/gpu/test_judge_gpu.py ;;
    corpus) run "corpus_${2:?family}" 560 python3 -m pytest -q -m gpu tests/gpu/test_compile_gpu.py -k "$2/" ;;
    dropin)
        run training 200 python3 -m pytest -q -m gpu tests/gpu/test_training_gpu.py
        run api 120 python3 -m pytest -q -m gpu tests/gpu/test_api_gpu.py
        run batch 220 python3 -m pytest -q -m gpu tests/gpu/test_batch_gpu.py -k "seeds or models or recurrent" ;;
    gemm)
        run gemm_tests 240 python3 -m pytest -q -m gpu tests/gpu/test_gemm_gpu.py -x
        run gemm_bench 320 python3 bench/gemm.py "$out/gemm" ;;
    conv)
        run conv_tests 240 python3 -m pytest -q -m gpu tests/gpu/test_conv_gpu.py -x
        run conv_bench 320 python3 bench/conv.py "$out/conv" ;;
    *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' ;;
esac
