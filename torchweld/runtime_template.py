"""The run-time part every emitted file carries: build through load_inline, launch, check."""

# NOTE: this text is pasted into emitted files, which must need PyTorch alone. It reads the
# emitted file's globals `_CUDA_SRC` and `_KERNEL_ARGS` (kernel name -> number of pointers).
RUNTIME = r'''
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
        errors = [l for l in str(e).splitlines() if "error" in l.lower()][:8]
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


def _tw_check(kernel, tensors, specs):
    """Refuse what a kernel was not built for (device, dtype, shape); lay inputs out as it expects."""
    dev = tensors[0].device
    if dev.type == "cuda" and dev.index != torch.cuda.current_device():
        raise RuntimeError(f"torchweld {kernel}: inputs are on {dev} but the current device is cuda:{torch.cuda.current_device()}")
    out = []
    for i, (t, (dtype, shape, stride)) in enumerate(zip(tensors, specs)):
        if not isinstance(t, torch.Tensor) or t.device != dev or not t.is_cuda:
            raise RuntimeError(f"torchweld {kernel}: input {i} must be a CUDA tensor on {dev}, got {getattr(t, 'device', type(t).__name__)}")
        if t.dtype != dtype:
            raise TypeError(f"torchweld {kernel}: input {i} must be {dtype}, got {t.dtype}")
        if tuple(t.shape) != shape:
            raise ValueError(f"torchweld {kernel}: input {i} must have shape {shape}, got {tuple(t.shape)}")
        if stride is None:
            t = t if t.is_contiguous() else t.contiguous()
        elif any(n > 1 and a != b for n, a, b in zip(shape, t.stride(), stride)):
            t = torch.empty_strided(shape, stride, dtype=dtype, device=dev).copy_(t)  # the layout it was built for
        out.append(t)
    return out


def _tw_layout(t, shape, stride):
    """A value made inside forward, in the layout its kernel indexes (None: contiguous)."""
    if stride is None:
        return t if t.is_contiguous() else t.contiguous()
    if any(n > 1 and a != b for n, a, b in zip(shape, t.stride(), stride)):
        return torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)
    return t


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _tw_stream(dev):
    """The current CUDA stream's handle (the fast private call where this PyTorch has it)."""
    return _raw_stream(dev.index) if _raw_stream is not None else torch.cuda.current_stream(dev).cuda_stream


def _tw_launch(kernel, err):
    if err:
        raise RuntimeError(f"torchweld {kernel}: CUDA error {err}: {_LIB.tw_error_string(err).decode()}")
'''
