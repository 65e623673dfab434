"""Set and restore the TF32 permission of cuBLAS and cuDNN.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.

The judge and the first check `torchweld compile` runs set fp32 precision with one switch of their
own, judge/guards.fp32_mode, which sets these two flags and float32_matmul_precision and restores
them; an emitted file cannot import it, so it carries this one, which allows TF32 around the
forward of a file compiled with `--precision tf32` and puts the caller's two flags back after.
"""
import torch

# pasted into files compiled with `--precision tf32` only.
# --- pasted from here ---
def _tw_tf32(flags):
    """Set (cuBLAS, cuDNN) TF32 permission; returns the settings it replaced."""
    was = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    return was
