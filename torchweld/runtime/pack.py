"""A linear's weight laid out (in, out) once per version, for cuBLAS's NN form.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import torch

# pasted into files with a packed weight (gemm_pack.py).
# --- pasted from here ---
def _tw_pack(module, site, w):
    """w.t() laid out (in, out): made once per version and address of w (an in-place update or
    load_state_dict packs again) and kept beside the module (not a buffer: the state dict stays the
    original's)."""
    try:
        key = (id(w), w._version, w.data_ptr())
    except RuntimeError:  # NOTE: inference tensors keep no version: the GEMM reads w.t() as it is
        return w.t()
    packs = module.__dict__.setdefault("_tw_packs", {})
    held = packs.get(site)
    if held is None or held[0] != key:
        with torch.inference_mode(False), torch.no_grad():  # NOTE: w is held too, so no other tensor takes its id
            held = packs[site] = (key, w, w.t().contiguous())
    return held[2]
