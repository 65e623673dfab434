"""Run a GEMM site our way or the library's: checked against each other and timed at its first call.

Everything below the `pasted from here` line is pasted into emitted files with our GEMM (`--gemm`)
by emit/runtime.py; above it, what makes this a module of its own.
"""
import warnings

import torch

from torchweld.runtime.site_timing import _tw_time

# pasted into files with our GEMM. Each site has two functions of the same arguments returning the
# same outputs: `ours` (our GEMM kernel with its epilogue; None where this device has no GEMM path)
# and `library` (the aten GEMM, then the existing epilogue kernel or plain PyTorch ops).
# --- pasted from here ---
def _tw_gemm_flags():
    """sm_90a's -gencode on a device of compute capability 9.0 (wgmma needs it; it replaces
    load_inline's own arch flags); elsewhere none (load_inline's default for the device)."""
    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        return ["-gencode=arch=compute_90a,code=sm_90a"]
    return []


# |ours - library| <= atol + rtol * |library| elementwise, per dtype: the judge's tolerance table.
_TW_GEMM_TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


def _tw_gemm(module, site, ours, library, *args):
    """`ours(*args)` or `library(*args)`, as `_tw_gemm_pick` decided once per site and device at the
    first call (kept beside the module)."""
    picks = module.__dict__.setdefault("_tw_gemm_picks", {})
    key = (site, args[0].get_device())
    pick = picks.get(key)
    if pick is None:
        if args[0].is_cuda and torch.cuda.is_current_stream_capturing():
            return library(*args)  # NOTE: nothing is checked or timed under capture; decided at a later call
        pick = picks[key] = _tw_gemm_pick(site, ours, library, args)
    return (ours if pick[0] == "ours" else library)(*args)


def _tw_gemm_pick(site, ours, library, args):
    """(way, why): the library off CUDA; else `_tw_gemm_decide`, timed as calls are in use."""
    if not args[0].is_cuda:
        return "library", "not on CUDA"
    return _tw_gemm_decide(site, ours, library, args, lambda calls: _tw_time(calls, args[0].device))


def _tw_gemm_decide(site, ours, library, args, time):
    """(way, why): ours where this device runs it, its outputs match the library's on these inputs
    within the dtype's tolerance, and it is faster (`time`: medians of calls); a mismatch warns once
    (this runs once per site and device) and keeps the library."""
    mine = ours(*args)
    if mine is None:
        return "library", "this device has no GEMM path"
    ref = library(*args)
    err = _tw_gemm_mismatch(mine, ref)
    if err:
        warnings.warn(f"torchweld: our GEMM at site {site} does not match the library's ({err}): "
                      "the library runs it", RuntimeWarning, stacklevel=4)
        return "library", err
    t_ours, t_lib = time([lambda: ours(*args), lambda: library(*args)])
    return ("ours" if t_ours < t_lib else "library"), f"ours {t_ours:.4g} ms, library {t_lib:.4g} ms"


def _tw_gemm_mismatch(mine, ref, tf32=None):
    """Why outputs `mine` differ from `ref` beyond the dtype's tolerance (NaN where NaN), or "". `tf32`:
    whether the library may use TF32 on fp32 (None: cuBLAS's own flag)."""
    for i, (a, b) in enumerate(zip(mine, ref)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i}: {tuple(a.shape)} {a.dtype} against {tuple(b.shape)} {b.dtype}"
        atol, rtol = _TW_GEMM_TOL.get(b.dtype, (1e-4, 1e-4))
        if b.dtype == torch.float32 and (torch.backends.cuda.matmul.allow_tf32 if tf32 is None else tf32):
            atol, rtol = 1e-3, 1e-3  # NOTE: both sides may use TF32 (--precision tf32): the judge's TF32 tolerance
        x, y = a.double(), b.double()
        bad = ~(((x - y).abs() <= atol + rtol * y.abs()) | (x.isnan() & y.isnan()) | (x == y))
        if bad.any():
            worst = (x - y).abs().nan_to_num(float("inf")).max().item()
            return f"output {i}: {int(bad.sum())} of {b.numel()} elements off, max error {worst:.3g}"
    return ""
