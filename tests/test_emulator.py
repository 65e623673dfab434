"""The CPU emulator (tests/emulator.py) itself: barriers and shuffles as a GPU runs them, and each
mistake a GPU would punish or hide (a missing barrier, a divergent one, a launch over its bounds, a
read or write outside a tensor, an output never written) shows as a wrong value or a launch error."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, Launchers, build, emu_source, poisoned_torch

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

SOURCE = r"""
#include <cuda_runtime.h>
extern "C" const char* tw_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

// Reverses each block's 64 values through shared memory; SYNC: with the barrier between.
template <int SYNC> __global__ void __launch_bounds__(64) rev(const float* __restrict__ in_x, float* __restrict__ out_y) {
  __shared__ float s[64];
  s[threadIdx.x] = in_x[blockIdx.x * 64 + threadIdx.x];
  if (SYNC) __syncthreads();
  out_y[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];
}
// Each warp's sum by butterfly shuffles, then the block's through shared memory.
__global__ void __launch_bounds__(128) total(const float* __restrict__ in_x, float* __restrict__ out_y) {
  __shared__ float sm[4];
  float v = in_x[blockIdx.x * 128 + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = v;
  __syncthreads();
  out_y[blockIdx.x * 128 + threadIdx.x] = sm[0] + sm[1] + sm[2] + sm[3];
}
__global__ void half_sync(const float* __restrict__ in_x, float* __restrict__ out_y) {
  if (threadIdx.x < 32) __syncthreads();
  out_y[threadIdx.x] = in_x[threadIdx.x];
}
__global__ void shifted(const float* __restrict__ in_x, float* __restrict__ out_y, int shift) {
  out_y[(int)threadIdx.x + shift] = in_x[threadIdx.x];
}
__global__ void past_end(const float* __restrict__ in_x, float* __restrict__ out_y) {
  out_y[threadIdx.x] = in_x[threadIdx.x + 80];  // onto the unmapped page after the copy of x
}
__global__ void before_start(const float* __restrict__ in_x, float* __restrict__ out_y) {
  out_y[threadIdx.x] = in_x[(int)threadIdx.x - 1];
}
__global__ void partial_warp(const float* __restrict__ in_x, float* __restrict__ out_y) {
  out_y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, in_x[threadIdx.x], 1);
}
__global__ void skips_last(const float* __restrict__ in_x, float* __restrict__ out_y) {
  if (threadIdx.x != 63) out_y[threadIdx.x] = in_x[threadIdx.x];
}

"""
LAUNCHES = {  # launcher: kernel<<<blocks, threads>>>, as the emitted files launch
    "rev": "rev<1><<<3u, 64", "rev_nosync": "rev<0><<<3u, 64", "rev_too_wide": "rev<1><<<1u, 128",
    "total": "total<<<2u, 128", "half_sync": "half_sync<<<1u, 64", "after": "shifted<<<1u, 64",
    "before": "shifted<<<1u, 64", "past_end": "past_end<<<1u, 64", "before_start": "before_start<<<1u, 64",
    "partial_warp": "partial_warp<<<1u, 48", "skips_last": "skips_last<<<1u, 64",
}
SHIFT = {"after": ", 1", "before": ", -1"}


def _launcher(name: str, launch: str) -> str:
    return (f'extern "C" int tw_launch_{name}(const void* in_x, void* out_y, int vec, void* stream) {{\n'
            f"  {launch}, 0, (cudaStream_t)stream>>>((const float*)in_x, (float*)out_y{SHIFT.get(name, '')});\n"
            "  return (int)cudaGetLastError();\n}\n")


@pytest.fixture(scope="module", params=["switch", "ucontext"])
def lib(request):
    """The launchers, fibers switched by the x86-64 routine or by the portable swapcontext."""
    src = SOURCE + "".join(_launcher(name, launch) for name, launch in LAUNCHES.items())
    flags = ["-DTW_EMU_UCONTEXT"] if request.param == "ucontext" else []
    return Launchers(build(src, *flags), dict.fromkeys(LAUNCHES, 2), vec=True)


def _run(lib, kernel, n=192):
    """(CUDA error, its message, the output) of one launch over arange(n)."""
    x = torch.arange(n, dtype=torch.float32)
    y = poisoned_torch().empty(n)
    err = getattr(lib, "tw_launch_" + kernel)(x, y, 1, None)
    return err, lib.tw_error_string(err).decode(), y


def test_barrier_and_shared_memory(lib):
    err, _, y = _run(lib, "rev")
    assert err == 0 and torch.equal(y, torch.arange(192.0).view(3, 64).flip(1).reshape(-1))


def test_missing_barrier_reads_poison_or_another_threads_old_value(lib):
    err, _, y = _run(lib, "rev_nosync")
    want = torch.arange(192.0).view(3, 64).flip(1).reshape(-1)
    assert err == 0
    assert y.isnan().any() and not torch.equal(y.nan_to_num(), want)


def test_shuffles_and_block_sum(lib):
    err, _, y = _run(lib, "total", 256)
    want = torch.arange(256.0).view(2, 128).sum(1, keepdim=True).expand(2, 128).reshape(-1)
    assert err == 0 and torch.equal(y, want)


@pytest.mark.parametrize("kernel,message", [
    ("half_sync", "deadlock: 32 threads wait at __syncthreads, 0 at a warp shuffle, 32 returned"),
    ("rev_too_wide", "invalid launch <<<1, 128>>> (__launch_bounds__ 64)"),
    ("past_end", "memory fault"),
    ("after", "thread 63: memory fault"),  # x ends at a page boundary: the write lands on the unmapped page
    ("partial_warp", "a shuffle's mask names lanes past the block's last thread"),
])
def test_launch_errors(lib, kernel, message):
    err, text, _ = _run(lib, kernel, 64)
    assert err and message in text, text
    assert _run(lib, "rev")[0] == 0  # the error was read: the next launch runs


def test_a_write_before_a_tensor_fails(lib):
    with pytest.raises(AssertionError, match=r"before wrote outside its operands: \['byte -4 of 256'\]"):
        _run(lib, "before", 64)


def test_a_read_before_a_tensor_is_poison(lib):
    err, _, y = _run(lib, "before_start", 64)
    assert err == 0 and y[0].isnan() and y[1:].eq(torch.arange(63.0)).all()


def test_an_output_never_written_stays_poison(lib):
    err, _, y = _run(lib, "skips_last", 64)
    assert err == 0 and y[:63].eq(torch.arange(63.0)).all() and y[63].isnan()


def test_unknown_forms_are_refused():
    with pytest.raises(ValueError):
        emu_source("__global__ void k(float* y) { __shared__ float s[4], t[4]; }")
