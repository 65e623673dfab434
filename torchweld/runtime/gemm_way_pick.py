"""Run a GEMM site the way measured fastest at its first call of each size class: ours, addmm or a cuBLASLt
epilogue.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import torch

from torchweld.runtime.site_timing import _tw_time

# pasted into files with a GEMM site (lt_epilogue.py). Each site has a function
# `fn(module, way, *args)` running the GEMM and its kernel one way: "ours" (the GEMM then our kernel),
# "addmm" (torch.addmm, then our kernel given -0.0 for the bias) or "epilogue" (torch._addmm_activation).
# Every way runs under the same TF32 flags (the fast path's), timing included.
# --- pasted from here ---
def _tw_lt(module, site, fn, ways, *args):
    """`fn(module, way, *args)`, the way chosen once per site, device and size class at its first call
    there (`_tw_lt_pick`) and kept beside the module as (way, {way: median ms}). The size class is the bit
    length of the rows of the GEMM's first matrix (args[0]): a runtime batch or sequence length changes
    them, and the fastest way with them; a file called at one shape picks once."""
    plans = module.__dict__.setdefault("_tw_lt_plans", {})
    key = (site, args[0].get_device(), args[0].shape[0].bit_length())
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = _tw_lt_pick(module, fn, ways, args)
    return fn(module, plan[0], *args)


def _tw_lt_pick(module, fn, ways, args):
    """(way, {way: median ms}): the fastest of `ways` where it is clearly faster than "ours".

    NOTE: never off CUDA: there torch._addmm_activation's GELU is the exact (erf) form, not tanh."""
    if not args[0].is_cuda or torch.cuda.is_current_stream_capturing():
        return "ours", {}
    med = dict(zip(ways, _tw_time([lambda w=w: fn(module, w, *args) for w in ways], args[0].device)))
    best = min(ways, key=med.__getitem__)
    # NOTE: a gain must be clear (3% and 2 us), as in _tw_pick: the medians of 7 calls at one first call
    # are a sample, and a way that wins by less on it may lose in use; a tie keeps ours, the way the
    # compiler planned (and the only one off CUDA).
    clear = med[best] < 0.97 * med["ours"] and med["ours"] - med[best] > 0.002
    return (best if clear else "ours"), med


def _tw_zero(module, site, bias):
    """-0.0 in bias's shape, dtype and device (x + -0.0 is x for every x, -0.0 included): made once per
    site, device and dtype and kept beside the module (not a buffer: the state dict stays the original's)."""
    zeros = module.__dict__.setdefault("_tw_lt_zeros", {})
    key = (site, bias.get_device(), bias.dtype)
    zero = zeros.get(key)
    if zero is None:
        zero = zeros[key] = torch.full(bias.shape, -0.0, dtype=bias.dtype, device=bias.device)
    return zero
