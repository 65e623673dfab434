"""A module's configuration: what makes one instance of its classes differ from another besides its
weights. `torchweld.compile` keys its cache on it, and a file it writes for a module given without
its constructor's arguments checks it once, at the end of ModelNew.__init__ (another configuration
takes the original forward: the kernels hold the captured one's constants).

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import torch

# pasted into files written by torchweld.compile for a module without a problem file's constructor arguments.
# --- pasted from here ---
def _tw_plain(v):
    """A value whose repr is Python that makes it: finite numbers, strings, None, dtypes, containers of them."""
    if isinstance(v, (tuple, list)):
        return all(_tw_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_tw_plain(k) and _tw_plain(x) for k, x in v.items())
    if isinstance(v, float):
        return v == v and abs(v) != float("inf")  # NOTE: repr(inf) and repr(nan) are no Python
    return isinstance(v, (int, bool, str, type(None), torch.dtype))


def _tw_config(module):
    """Each submodule's class and plain attributes (a conv's stride, a scale) and each parameter's
    and buffer's shape and dtype, as one string."""
    parts = []
    for path, m in module.named_modules(remove_duplicate=False):
        attrs = sorted((k, repr(v)) for k, v in vars(m).items()
                       if not k.startswith("_") and k != "training" and _tw_plain(v))
        parts.append((path, type(m).__name__ if path else "", attrs))  # NOTE: the root is Model or ModelNew
    for path, t in [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]:
        parts.append((path, tuple(t.shape), str(t.dtype)))
    return repr(parts)
