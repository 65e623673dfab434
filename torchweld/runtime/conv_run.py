"""Run a convolution site in the layout and cuDNN mode measured fastest at its first call of each batch class.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import torch

from torchweld.runtime.site_timing import _tw_time

# pasted into files with a convolution. Layout and algorithm planning: each convolution site
# runs in the memory format (PyTorch's NCHW, or channels-last) and cuDNN mode (heuristic pick, or
# cudnn.benchmark's measured pick) that was measured fastest for its shape, once per process and
# power-of-two class of the batch (a runtime batch changes the shape, and the fastest pair with it).
# A result made in another format than the original's is converted to `to` (the captured layout)
# at once, so every later step sees the original's layout; `to=None` (conv_layout.py: every reader
# is a kernel with a build for either layout) hands it on as cuDNN made it.
# --- pasted from here ---
def _tw_conv_run(x, w, args, cfg, to):
    fmt, bench = cfg
    if fmt is not None:
        x = x.contiguous(memory_format=fmt)
    if bench:
        was = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        try:
            out = torch.convolution(x, w, *args)
        finally:
            torch.backends.cudnn.benchmark = was
    else:
        out = torch.convolution(x, w, *args)
    return out if fmt is None or to is None else out.contiguous(memory_format=to)


def _tw_pick(x, w, args, fmt, to):
    """Time each (memory format, cudnn.benchmark) pair with `_tw_time`, the conversion to `to`
    included (its warm-up call lets cudnn.benchmark measure its algorithms). Keep the default unless
    another is clearly faster. Returns (pair, median ms of each pair)."""
    configs = [(None, False), (None, True)] + ([(fmt, False), (fmt, True)] if fmt is not None else [])
    if torch.cuda.is_current_stream_capturing():
        return configs[0], []
    packed = [w if f is None else w.contiguous(memory_format=f) for f, _ in configs]
    med = _tw_time([lambda cfg=cfg, wc=wc: _tw_conv_run(x, wc, args, cfg, to) for cfg, wc in zip(configs, packed)],
                   x.device)
    best = min(range(len(configs)), key=med.__getitem__)
    # NOTE: a gain must be clear (10% and 20 us): a pair that wins by less on this measurement was
    # seen to lose it in use (cudnn.benchmark's picks can launch more kernels).
    clear = med[best] < 0.9 * med[0] and med[0] - med[best] > 0.02
    return (configs[best] if clear else configs[0]), med


def _tw_conv(module, site, x, w, *args, to=torch.contiguous_format):
    """aten.convolution at one site, in the layout measured for its batch's power-of-two class, returned in
    layout `to` (None: as made); the weight is converted once per version (an in-place update or
    load_state_dict bumps it) and kept beside the module, one copy per site and layout."""
    plans = module.__dict__.setdefault("_tw_conv_plans", {})
    plan = plans.get((site, x.shape[0].bit_length()))
    if plan is None:
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
        plan = plans[(site, x.shape[0].bit_length())] = _tw_pick(x, w, args, fmt, to)
    cfg = plan[0]
    if cfg == (None, False):  # NOTE: the usual pick: PyTorch's own call, nothing around it on the hot path
        return torch.convolution(x, w, *args)
    if cfg[0] is None:
        return _tw_conv_run(x, w, args, cfg, to)
    packs = module.__dict__.setdefault("_tw_conv_packed", {})
    key, packed = (id(w), w.data_ptr(), w._version), packs.get((site, cfg[0]))
    if packed is None or packed[0] != key:  # NOTE: w is held, so no later weight (a re-folded one) reuses its id
        packed = packs[(site, cfg[0])] = (key, w.contiguous(memory_format=cfg[0]), w)
    return _tw_conv_run(x, packed[1], args, cfg, to)
