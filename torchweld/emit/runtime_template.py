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
'''

# NOTE: pasted into files that choose between ways of running a step by timing them at its first
# call: a convolution's layout (CONV_RUNTIME), a cuBLASLt epilogue (LT_RUNTIME).
TIMING_RUNTIME = r'''
def _tw_time(calls, device):
    """Median ms of each call in `calls` (functions of no argument), timed as a call is timed in
    use: one warm-up call each, then the L2 cache flushed before each, CUDA events around one call,
    the calls interleaved, the median of 7."""
    for call in calls:
        call()
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
    times = [[] for _ in calls]
    for _ in range(7):
        for i, call in enumerate(calls):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end))
    return [sorted(t)[len(t) // 2] for t in times]
'''

# NOTE: pasted into files with a convolution. Layout and algorithm planning: each convolution site
# runs in the memory format (PyTorch's NCHW, or channels-last) and cuDNN mode (heuristic pick, or
# cudnn.benchmark's measured pick) that was measured fastest for its shape, once per process.
# A result made in another format than the original's is converted to `to` (the captured layout)
# at once, so every later step sees the original's layout; `to=None` (conv_layout.py: every reader
# is a kernel with a build for either layout) hands it on as cuDNN made it.
CONV_RUNTIME = r'''
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
    """aten.convolution at one site, in its measured layout, returned in layout `to` (None: as made);
    the weight is converted once per version (an in-place update or load_state_dict bumps it) and
    kept beside the module."""
    plans = module.__dict__.setdefault("_tw_conv_plans", {})
    plan = plans.get(site)
    if plan is None:
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
        cfg, measured = _tw_pick(x, w, args, fmt, to)
        plan = plans[site] = [cfg, None, measured]
    cfg, packed = plan[0], plan[1]
    if cfg == (None, False):  # NOTE: the usual pick: PyTorch's own call, nothing around it on the hot path
        return torch.convolution(x, w, *args)
    if cfg[0] is None:
        return _tw_conv_run(x, w, args, cfg, to)
    key = (id(w), w.data_ptr(), w._version)
    if packed is None or packed[0] != key:  # NOTE: w is held, so no later weight (a re-folded one) reuses its id
        packed = plan[1] = (key, w.contiguous(memory_format=cfg[0]), w)
    return _tw_conv_run(x, packed[1], args, cfg, to)
'''

# NOTE: pasted into files where per-channel ops after a convolution were folded into its weight and
# bias (conv_fold.py). `spec`: (transposed, groups, has bias, stages); in a stage, an int is an index
# into `ts` (the weight, the bias, then the folded tensors) and a float is a number.
FOLD_RUNTIME = r'''
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
'''

# NOTE: pasted into files with a packed weight (gemm_pack.py).
PACK_RUNTIME = r'''
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
'''

# NOTE: pasted into files compiled with `--precision tf32` only.
TF32_RUNTIME = r'''
def _tw_tf32(flags):
    """Set (cuBLAS, cuDNN) TF32 permission; returns the settings it replaced."""
    was = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    return was
'''

# NOTE: pasted into files compiled with `--cuda-graph` only.
GRAPH_RUNTIME = r'''
def _tw_graphed(module, inputs, state, fast):
    """Run `fast(*inputs, *state)` as a CUDA graph: captured at the first call (after two warm-up
    calls, which build, plan layouts and make the libraries' workspaces), captured again when a
    parameter or buffer has moved or changed in place; each call copies the inputs in, replays, and
    clones the output."""
    try:  # NOTE: with the versions: a weight packed or folded at capture would go stale on an in-place update
        key = tuple((t.data_ptr(), t._version) for t in state)
    except RuntimeError:  # inference tensors (a model built under inference_mode) keep no version: no graph
        return fast(*inputs, *state)
    held = module.__dict__.get("_tw_graph")
    if held is None or held[0] != key:
        for _ in range(2):
            fast(*inputs, *state)
        torch.cuda.current_stream().synchronize()
        static_in = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = fast(*static_in, *state)
        held = module.__dict__["_tw_graph"] = (key, graph, static_in, static_out)
    _, graph, static_in, static_out = held
    for s, t in zip(static_in, inputs):
        if isinstance(t, torch.Tensor):
            s.copy_(t)
    graph.replay()
    if isinstance(static_out, tuple):
        return tuple(o.clone() for o in static_out)
    return static_out.clone()
'''

# NOTE: pasted into files with a GEMM site (lt_epilogue.py). Each site has a function
# `fn(module, way, *args)` running the GEMM and its kernel one way: "ours" (the GEMM then our kernel),
# "addmm" (torch.addmm, then our kernel given -0.0 for the bias) or "epilogue" (torch._addmm_activation).
# Every way runs under the same TF32 flags (the fast path's), timing included.
LT_RUNTIME = r'''
def _tw_lt(module, site, fn, ways, *args):
    """`fn(module, way, *args)`, the way chosen once per site and device at its first call
    (`_tw_lt_pick`) and kept beside the module as (way, {way: median ms})."""
    plans = module.__dict__.setdefault("_tw_lt_plans", {})
    key = (site, args[0].get_device())
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
'''
