"""Run a convolution site our way (`--conv-ours`) or cuDNN's in either layout: checked against each
other and timed at its first call.

Everything below the `pasted from here` line is pasted into emitted files with our convolution by
emit/runtime.py; above it, what makes this a module of its own.
"""
import warnings

import torch

from torchweld.runtime.gemm_select import _tw_gemm_mismatch  # NOTE: pasted into every file with our convolution
from torchweld.runtime.site_timing import _tw_time

# pasted into files with our convolution. Each site has `ours(module, *args)` (our implicit-GEMM kernel
# with its epilogue; None where this device has no path) and `library(module, fmt, *args)`
# (torch.convolution with input and weight in memory format `fmt`, None: as given, then the folded ops).
# --- pasted from here ---
def _tw_conv_pack(w, groups, transposed):
    """The weight K-major as our kernel reads it: [groups * out channels per group, taps, in channels per group]."""
    if transposed:
        cin, cog = w.shape[0], w.shape[1]
        return w.reshape(groups, cin // groups, cog, -1).permute(0, 2, 3, 1).reshape(groups * cog, -1, cin // groups) \
            .contiguous()
    return w.reshape(w.shape[0], w.shape[1], -1).transpose(1, 2).contiguous()


def _tw_conv_packed(module, site, w, groups, transposed):
    """`_tw_conv_pack(w)`, made once per version of w (an in-place update or load_state_dict bumps it)."""
    packs = module.__dict__.setdefault("_tw_conv_packs", {})
    key = (id(w), w.data_ptr(), w._version)
    held = packs.get(site)
    if held is None or held[0] != key:  # NOTE: w is held, so no later weight reuses its id
        held = packs[site] = (key, _tw_conv_pack(w, groups, transposed), w)
    return held[1]


def _tw_conv_lib(module, site, fmt, x, w, *args):
    """torch.convolution with x and w in memory format `fmt` (None: as given; w converted once per version)."""
    if fmt is None:
        return torch.convolution(x, w, *args)
    packs = module.__dict__.setdefault("_tw_conv_lib_packs", {})
    key = (id(w), w.data_ptr(), w._version)
    held = packs.get(site)
    if held is None or held[0] != key:
        held = packs[site] = (key, w.contiguous(memory_format=fmt), w)
    return torch.convolution(x.contiguous(memory_format=fmt), held[1], *args)


def _tw_channels_last(x):
    """x with its channels innermost (any rank), a copy only where it is not."""
    cl = x.movedim(1, -1)
    return x if cl.is_contiguous() else cl.contiguous().movedim(-1, 1)


_TW_CONV_FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


def _tw_convk(module, site, ours, library, *args):
    """`ours(module, *args)` or `library(module, fmt, *args)`, as `_tw_convk_pick` decided once per site and device."""
    picks = module.__dict__.setdefault("_tw_convk_picks", {})
    key = (site, args[0].get_device())
    pick = picks.get(key)
    if pick is None:
        if args[0].is_cuda and torch.cuda.is_current_stream_capturing():
            return library(module, None, *args)  # NOTE: nothing is checked or timed under capture; decided at a later call
        pick = picks[key] = _tw_convk_pick(site, lambda: ours(module, *args), lambda f: library(module, f, *args), args)
    return ours(module, *args) if pick[0] == "ours" else library(module, pick[0], *args)


def _tw_convk_pick(site, ours, library, args):
    """(way, why): cuDNN as given off CUDA; else `_tw_convk_decide`, timed as calls are in use."""
    if not args[0].is_cuda:
        return None, "not on CUDA"
    return _tw_convk_decide(site, ours, library, args, lambda calls: _tw_time(calls, args[0].device))


def _tw_convk_decide(site, ours, library, args, time):
    """(way, why) of the site run by `ours()` and `library(fmt)`: ours ("ours") where this device runs it,
    its outputs match cuDNN's within the dtype's tolerance, and it is the fastest; else the faster of
    cuDNN as given (None) and channels-last (a memory format)."""
    fmts = [None] + ([_TW_CONV_FORMATS[args[0].dim()]] if args[0].dim() in _TW_CONV_FORMATS else [])
    ways = [(f, lambda f=f: library(f)) for f in fmts]
    mine = ours()
    err = "this device has no convolution path" if mine is None else _tw_conv_mismatch(mine, library(None))
    if err and mine is not None:
        warnings.warn(f"torchweld: our convolution at site {site} does not match cuDNN's ({err}): "
                      "cuDNN runs it", RuntimeWarning, stacklevel=4)
    if not err:
        ways.append(("ours", ours))
    med = time([call for _, call in ways])
    best = min(range(len(ways)), key=med.__getitem__)
    return ways[best][0], ", ".join(f"{w if w else 'cudnn'} {t:.4g} ms" for (w, _), t in zip(ways, med)) + (
        f"; ours not run: {err}" if err else "")


def _tw_conv_mismatch(mine, ref):
    """Why outputs `mine` differ from cuDNN's `ref` beyond the dtype's tolerance, or "" (cuDNN's TF32 flag)."""
    return _tw_gemm_mismatch(mine, ref, torch.backends.cudnn.allow_tf32)
