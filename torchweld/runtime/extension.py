"""Build the file's CUDA source through load_inline, launch its kernels, check every launch.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import ctypes
import hashlib
import inspect

import torch

# NOTE: stand-ins for the emitted file's own globals, so that this module imports on its own.
_CUDA_SRC = ""
_KERNEL_ARGS: dict = {}

# this text is pasted into emitted files, which must need PyTorch alone. It reads the
# emitted file's globals `_CUDA_SRC` and `_KERNEL_ARGS` (kernel name -> number of pointers).
# --- pasted from here ---
def _tw_build():
    """Compile _CUDA_SRC once per content hash (load_inline caches it) and open it with ctypes."""
    from torch.utils import cpp_extension

    name = "torchweld_" + hashlib.sha256(_CUDA_SRC.encode()).hexdigest()[:16]
    kwargs = dict(name=name, cpp_sources="", cuda_sources=_CUDA_SRC, is_python_module=False,
                  extra_cuda_cflags=["-O3", "-lineinfo"], verbose=False)
    if "no_implicit_headers" in inspect.signature(cpp_extension.load_inline).parameters:
        kwargs["no_implicit_headers"] = True  # the CUDA source includes no PyTorch header: builds in seconds
    try:
        path = cpp_extension.load_inline(**kwargs)
    except Exception as e:  # ninja's message holds the compiler output; keep its error lines
        lines = [l for l in str(e).splitlines() if l.strip()]
        # NOTE: else its last lines: a missing toolkit (no nvcc, CUDA_HOME unset, no ninja) says so without "error"
        errors = [l for l in lines if "error" in l.lower()][:8] or lines[-8:] or [type(e).__name__]
        where = cpp_extension._get_build_directory(name, False)
        raise RuntimeError(f"torchweld: building {name} failed (sources in {where}):\n" + "\n".join(errors)) from None
    lib = ctypes.CDLL(path)
    for kernel, n_ptrs in _KERNEL_ARGS.items():
        fn = getattr(lib, "tw_launch_" + kernel)
        fn.argtypes = [ctypes.c_void_p] * n_ptrs + [ctypes.c_int, ctypes.c_void_p]
        fn.restype = ctypes.c_int
    lib.tw_error_string.argtypes = [ctypes.c_int]
    lib.tw_error_string.restype = ctypes.c_char_p
    return lib


_LIB = _tw_build() if torch.cuda.is_available() else None


def _tw_layout(t, shape, stride):
    """An operand in the layout its kernel indexes (its device, dtype and shape are checked by forward's guard)."""
    if any(n > 1 and a != b for n, a, b in zip(shape, t.stride(), stride)):
        return torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)
    return t


# The current CUDA stream's handle for a device index (the fast private call where this PyTorch has it).
_tw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def _tw_fail(kernel, err):
    raise RuntimeError(f"torchweld {kernel}: CUDA error {err}: {_LIB.tw_error_string(err).decode()}")
