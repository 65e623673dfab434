"""Per-op emitters: each pointwise op as a CUDA expression and as a PyTorch expression.

CUDA expressions compute in `float` (fp16/bf16/fp32 data) or `double` (fp64 data) and follow
ATen's CUDA formulas, so results match eager up to rounding, NaN and inf included.
"""
from __future__ import annotations

import math

from torchweld.ir import ANCHORS, POOL, Node

# float-typed libm names; the double versions drop the trailing "f".
_LIBM = {
    "abs": "fabsf", "exp": "expf", "expm1": "expm1f", "log": "logf", "log1p": "log1pf", "log2": "log2f",
    "sqrt": "sqrtf", "rsqrt": "rsqrtf", "sin": "sinf", "cos": "cosf", "tan": "tanf", "tanh": "tanhf",
    "erf": "erff", "floor": "floorf", "ceil": "ceilf", "round": "rintf", "trunc": "truncf",
}


def fn(name: str, ctype: str) -> str:
    """libm function for the compute type (`expf` for float, `exp` for double)."""
    f = _LIBM.get(name, name)
    return f[:-1] if ctype == "double" and f.endswith("f") else f


def lit(value, ctype: str) -> str:
    """A C literal of the compute type."""
    if isinstance(value, bool) or ctype == "bool":
        return "true" if value else "false"
    v = float(value)
    if math.isnan(v):
        return "NAN" if ctype == "float" else "(double)NAN"
    if math.isinf(v):
        return ("" if v > 0 else "-") + ("INFINITY" if ctype == "float" else "(double)INFINITY")
    text = repr(v)
    return text + "f" if ctype == "float" else text


def cuda_expr(n: Node, args: list[str], ctype: str) -> str:
    """The C expression computing node `n` from argument expressions (constants already literal)."""
    op, T = n.op, ctype
    x = args[0] if args else ""
    y = args[1] if len(args) > 1 else ""
    z = args[2] if len(args) > 2 else ""
    one, zero = lit(1.0, T), lit(0.0, T)
    simple = {
        "add": f"({x} + {y})", "sub": f"({x} - {y})", "mul": f"({x} * {y})", "div": f"({x} / {y})",
        "neg": f"(-{x})", "fma": f"{fn('fmaf', T)}({x}, {y}, {z})", "reciprocal": f"({one} / {x})",
        "square": f"({x} * {x})", "minimum": f"tw_min({x}, {y})", "maximum": f"tw_max({x}, {y})",
        "clamp": f"tw_min(tw_max({x}, {y}), {z})", "fmod": f"{fn('fmodf', T)}({x}, {y})",
        "gt": f"({x} > {y})", "lt": f"({x} < {y})", "ge": f"({x} >= {y})", "le": f"({x} <= {y})",
        "eq": f"({x} == {y})", "ne": f"({x} != {y})", "logical_and": f"(({x} != 0) && ({y} != 0))",
        "logical_or": f"(({x} != 0) || ({y} != 0))", "logical_not": f"(!({x} != 0))",
        "where": f"({x} ? {y} : {z})", "relu": f"tw_max({x}, {zero})",
        "sign": f"(({zero} < {x}) - ({x} < {zero}))",
        "sigmoid": f"({one} / ({one} + {fn('exp', T)}(-{x})))",
        "silu": f"({x} / ({one} + {fn('exp', T)}(-{x})))",
        "mish": f"({x} * {fn('tanh', T)}({fn('log1p', T)}({fn('exp', T)}({x}))))",
        "hardsigmoid": f"(tw_min(tw_max({x} + {lit(3.0, T)}, {zero}), {lit(6.0, T)}) / {lit(6.0, T)})",
        "hardswish": f"({x} * tw_min(tw_max({x} + {lit(3.0, T)}, {zero}), {lit(6.0, T)}) / {lit(6.0, T)})",
        "gelu": f"({x} * {lit(0.5, T)} * ({one} + {fn('erf', T)}({x} * {lit(math.sqrt(0.5), T)})))",
        "gelu_tanh": (f"({lit(0.5, T)} * {x} * ({one} + {fn('tanh', T)}({lit(math.sqrt(2 / math.pi), T)}"
                      f" * ({x} + {lit(0.044715, T)} * {x} * {x} * {x}))))"),
    }
    if op in simple:
        return simple[op]
    if op in _LIBM:
        return f"{fn(op, T)}({x})"
    if op == "pow":
        return _pow(n, x, y, T)
    if op == "leaky_relu":
        return f"({x} > {zero} ? {x} : {x} * {lit(n.attr('slope'), T)})"
    if op == "elu":
        neg = f"{fn('expm1', T)}({x} * {lit(n.attr('input_scale'), T)}) * {lit(n.attr('alpha') * n.attr('scale'), T)}"
        return f"({x} > {zero} ? {x} * {lit(n.attr('scale'), T)} : {neg})"
    if op == "softplus":
        beta, thr = n.attr("beta"), n.attr("threshold")
        return (f"({x} * {lit(beta, T)} > {lit(thr, T)} ? {x} : "
                f"{fn('log1p', T)}({fn('exp', T)}({x} * {lit(beta, T)})) / {lit(beta, T)})")
    if op == "cast":
        return _cast(n, x, T)
    raise NotImplementedError(f"no CUDA emitter for {op}")


def _pow(n: Node, x: str, y: str, T: str) -> str:
    e = n.args[1]
    if isinstance(e, float):  # ATen's special cases for scalar exponents
        special = {2.0: f"({x} * {x})", 3.0: f"({x} * {x} * {x})", 0.5: f"{fn('sqrt', T)}({x})",
                   -0.5: f"{fn('rsqrt', T)}({x})", -1.0: f"({lit(1.0, T)} / {x})",
                   -2.0: f"({lit(1.0, T)} / ({x} * {x}))", 1.0: f"({x})"}
        if e in special:
            return special[e]
    return f"{fn('powf', T)}({x}, {y})"


def _cast(n: Node, x: str, T: str) -> str:
    """Casting rounds like a store and a reload of the target dtype."""
    return {
        "float16": f"__half2float(__float2half_rn({x}))",
        "bfloat16": f"__bfloat162float(__float2bfloat16_rn({x}))",
        "float32": f"((float)({x}))",
        "float64": f"((double)({x}))",
        "bool": f"({x} != 0)",
    }.get(n.dtype) or _unsupported(n)


def _unsupported(n: Node):
    raise NotImplementedError(f"cast to {n.dtype}")


def py_lit(v) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return f"float('{v}')"
    return repr(v)


def torch_expr(n: Node, args: list[str]) -> str:
    """The same op as PyTorch code: the general path of the emitted file, and what it documents."""
    op = n.op
    x = args[0] if args else ""
    y = args[1] if len(args) > 1 else ""
    z = args[2] if len(args) > 2 else ""
    infix = {"add": "+", "sub": "-", "mul": "*", "div": "/", "gt": ">", "lt": "<", "ge": ">=", "le": "<=",
             "eq": "==", "ne": "!="}
    if op in infix:
        return f"({x} {infix[op]} {y})"
    tensor_y = len(n.args) > 1 and isinstance(n.args[1], str)
    table = {
        "neg": f"(-{x})", "fma": f"({x} * {y} + {z})", "relu": f"torch.relu({x})",
        "minimum": f"torch.minimum({x}, {y})" if tensor_y else f"torch.clamp_max({x}, {y})",
        "maximum": f"torch.maximum({x}, {y})" if tensor_y else f"torch.clamp_min({x}, {y})",
        "clamp": f"torch.clamp({x}, {y}, {z})", "where": f"torch.where({x}, {y}, {z})",
        "pow": f"torch.pow({x}, {y})", "fmod": f"torch.fmod({x}, {y})",
        "logical_and": f"torch.logical_and({x}, {y})", "logical_or": f"torch.logical_or({x}, {y})",
        "gelu": f"F.gelu({x})", "gelu_tanh": f"F.gelu({x}, approximate='tanh')",
        "silu": f"F.silu({x})", "mish": f"F.mish({x})", "hardswish": f"F.hardswish({x})",
        "hardsigmoid": f"F.hardsigmoid({x})",
        "cast": f"{x}.to(torch.{n.dtype})",
    }
    if op in table:
        return table[op]
    if op == "leaky_relu":
        return f"F.leaky_relu({x}, {n.attr('slope')!r})"
    if op == "elu":
        return f"torch.ops.aten.elu({x}, {n.attr('alpha')!r}, {n.attr('scale')!r}, {n.attr('input_scale')!r})"
    if op == "softplus":
        return f"F.softplus({x}, {n.attr('beta')!r}, {n.attr('threshold')!r})"
    if op in ANCHORS or op == "reduce_aux":
        return _anchor_expr(n, args)
    return f"torch.{op}({x})"


def _anchor_expr(n: Node, args: list[str]) -> str:
    """Reductions, softmax, norms, pools and depthwise convolutions as the PyTorch calls they were captured from."""
    x, dims, keep = args[0], list(n.attr("dims", ())), n.attr("keepdim")
    if n.op in POOL:
        return _pool_expr(n, x)
    if n.op == "cat":
        return f"torch.cat([{', '.join(args)}], {n.attr('dim')!r})"
    if n.op == "reduce_aux":  # args: the anchor, its input
        x = args[1]
        if n.attr("what") == "mean":
            return f"torch.mean({x}, {dims!r}, keepdim={keep!r})"
        return f"torch.a{n.attr('what')}({x}, {dims!r}, keepdim={keep!r})"  # max's or min's values
    if n.op == "depthwise_conv":
        spatial = [list(n.attr(k)) for k in ("stride", "padding", "dilation")]
        conv = (f"torch.convolution({x}, {args[1]}, {args[2]}, {spatial[0]!r}, {spatial[1]!r}, {spatial[2]!r}, "
                f"False, {[0] * len(spatial[0])!r}, {n.attr('groups')!r})")
        window = n.attr("window")
        if window is None:
            return conv
        cut = ", ".join(f"{s}:{s + size}" for s, size in zip(window, n.shape[2:]))
        return f"{conv}[:, :, {cut}]"
    if n.op in ("sum", "mean", "amax", "amin", "logsumexp"):
        return f"torch.{n.op}({x}, {dims!r}, keepdim={keep!r})"
    if n.op in ("argmax", "argmin"):
        if n.attr("flat"):
            return f"torch.{n.op}({x}, keepdim={keep!r})"
        return f"torch.{n.op}({x}, {dims[0]!r}, keepdim={keep!r})"
    if n.op == "prod":
        return f"torch.prod({x}, {dims[0]!r}, keepdim={keep!r})"
    if n.op == "vector_norm":
        return f"torch.linalg.vector_norm({x}, {py_lit(n.attr('ord'))}, {dims!r}, keepdim={keep!r})"
    if n.op in ("var", "std"):
        return f"torch.{n.op}({x}, {dims!r}, correction={n.attr('correction')!r}, keepdim={keep!r})"
    if n.op in ("cumsum", "cumprod"):
        return f"torch.{n.op}({x}, {dims[0]!r})"
    if n.op in ("softmax", "log_softmax"):
        return f"torch.{n.op}({x}, {dims[0]})"
    w, b = args[1], args[2]
    if n.op == "layer_norm":
        return f"F.layer_norm({x}, {x}.shape[{dims[0]}:], {w}, {b}, {n.attr('eps')!r})"
    if n.op == "group_norm":
        return f"F.group_norm({x}, {n.attr('groups')!r}, {w}, {b}, {n.attr('eps')!r})"
    if n.op == "instance_norm":  # NOTE: updates the repeated running statistics in place, as traced
        rep = lambda v: f"{v}.repeat({x}.shape[0])" if v != "None" else "None"  # noqa: E731
        return (f"F.batch_norm({x}.reshape(1, -1, *{x}.shape[2:]), {args[3]}, {args[4]}, {rep(w)}, {rep(b)}, True, "
                f"{n.attr('momentum')!r}, {n.attr('eps')!r}).view({x}.shape)")
    return f"F.batch_norm({x}, {args[3]}, {args[4]}, {w}, {b}, True, {n.attr('momentum')!r}, {n.attr('eps')!r})"


def _pool_expr(n: Node, x: str) -> str:
    """A pool as the torch.nn.functional call with the captured parameters."""
    d = len(n.attr("out", n.attr("kernel", ())))
    if n.op.startswith("adaptive"):
        return f"F.{n.op}{d}d({x}, {list(n.attr('out'))!r})"
    k, s, p = (list(n.attr(key)) for key in ("kernel", "stride", "padding"))
    if n.op == "max_pool":
        return f"F.max_pool{d}d({x}, {k}, {s}, {p}, {list(n.attr('dilation'))}, ceil_mode={n.attr('ceil_mode')!r})"
    extra = f", divisor_override={n.attr('divisor')!r}" if n.attr("divisor") else ""
    return (f"F.avg_pool{d}d({x}, {k}, {s}, {p}, ceil_mode={n.attr('ceil_mode')!r}, "
            f"count_include_pad={n.attr('count_include_pad')!r}{extra})")
