"""A convolution's weight and bias with the per-channel ops after it folded in, once per version.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import torch

# pasted into files where per-channel ops after a convolution were folded into its weight and
# bias (conv_fold.py). `spec`: (transposed, groups, has bias, stages); in a stage, an int is an index
# into `ts` (the weight, the bias, then the folded tensors) and a float is a number.
# --- pasted from here ---
def _tw_fold(module, site, spec, *ts):
    """A convolution's weight and bias with the per-channel ops after it folded in, made once per
    version and address of every tensor they come from (an in-place update or load_state_dict
    folds again) and kept beside the module."""
    try:
        key = [(id(t), t._version, t.data_ptr()) for t in ts]
    except RuntimeError:  # NOTE: inference tensors (a model built under inference_mode) keep no version: fold each call
        key = None
    folds = module.__dict__.setdefault("_tw_folds", {})
    held = folds.get(site)
    if held is None or key is None or held[0] != key:
        # NOTE: never inference tensors (their version is unreadable, and _tw_conv keys on it); ts are
        # held too, so no other tensor takes one of their ids meanwhile.
        with torch.inference_mode(False), torch.no_grad():
            held = folds[site] = (key, ts) + _tw_fold_make(spec, ts)
    return held[2], held[3]


def _tw_fold_make(spec, ts):
    """W * s and b * s + t per output channel, computed in float64 and rounded once to W's dtype."""
    transposed, groups, bias, stages = spec
    w = ts[0]
    f64 = dict(dtype=torch.float64, device=w.device)
    c = w.shape[1] * groups if transposed else w.shape[0]
    scale = torch.ones(c, **f64)
    shift = ts[1].to(**f64) if bias else None
    val = lambda v: ts[v].reshape(-1).to(**f64) if isinstance(v, int) else v  # noqa: E731
    for op, *args in stages:
        if shift is None and op in ("bn", "add", "sub"):
            shift = torch.zeros(c, **f64)
        if op == "bn":
            mean, var, weight, beta, eps = args
            s = (val(var) + eps).rsqrt()
            if weight is not None:
                s = s * val(weight)
            scale, shift = scale * s, (shift - val(mean)) * s
            if beta is not None:
                shift = shift + val(beta)
        elif op == "mul":
            scale, shift = scale * val(args[0]), (shift * val(args[0]) if shift is not None else None)
        elif op == "div":
            scale, shift = scale / args[0], (shift / args[0] if shift is not None else None)
        else:
            shift = shift + val(args[0]) if op == "add" else shift - val(args[0])
    if transposed:  # NOTE: (in, out / groups, ...): output channel g * (out / groups) + j is column j of group g's rows
        s = scale.view(groups, 1, c // groups).expand(groups, w.shape[0] // groups, c // groups).reshape(w.shape[:2])
    else:
        s = scale
    folded = (w.to(**f64) * s.view(*s.shape, *[1] * (w.dim() - s.dim()))).to(w.dtype)  # w's memory format kept
    return folded, (shift.to(w.dtype) if shift is not None else None)
