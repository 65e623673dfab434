"""Capture of pointwise ops: an aten call -> one IR pointwise node (ir.POINTWISE), where its
overload and arguments are ones the fuser computes exactly; anything else stays an aten call.
"""
from __future__ import annotations

import torch

from torchweld.ir import FLOAT_DTYPES, Node
from torchweld.capture.meta import dtype_name, to_ir_arg, val

# A converter gets the aten call's (args, kwargs) and returns (op, args, attrs), or None where the
# overload or an argument is one it does not handle (then the call stays in PyTorch).


def _same(op):
    return lambda a, k: (op, tuple(a[:1]), ())


def _binary(op):
    return lambda a, k: (op, tuple(a[:2]), ()) if k.get("alpha", 1) == 1 and len(a) == 2 else None


def _add_sub(op):
    def convert(a, k):
        alpha = k.get("alpha", a[2] if len(a) > 2 else 1)
        return (op, (a[0], a[1]), ()) if alpha == 1 else None
    return convert


def _clamp(a, k):
    lo = k.get("min", a[1] if len(a) > 1 else None)
    hi = k.get("max", a[2] if len(a) > 2 else None)
    return ("clamp", (a[0], lo, hi), ())


def _div(a, k):
    if k.get("rounding_mode") is not None:
        return None  # floor/trunc division stays in PyTorch: integer-like semantics
    return ("div", (a[0], a[1]), ())


def _gelu(a, k):
    return ("gelu_tanh" if k.get("approximate", "none") == "tanh" else "gelu", (a[0],), ())


def _leaky_relu(a, k):
    return ("leaky_relu", (a[0],), (("slope", float(a[1]) if len(a) > 1 else 0.01),))


def _elu(a, k):
    alpha = float(a[1]) if len(a) > 1 else 1.0
    scale = float(a[2]) if len(a) > 2 else 1.0
    input_scale = float(a[3]) if len(a) > 3 else 1.0
    return ("elu", (a[0],), (("alpha", alpha), ("input_scale", input_scale), ("scale", scale)))


def _softplus(a, k):
    beta = float(a[1]) if len(a) > 1 else 1.0
    threshold = float(a[2]) if len(a) > 2 else 20.0
    return ("softplus", (a[0],), (("beta", beta), ("threshold", threshold)))


def _hardtanh(a, k):
    lo = float(a[1]) if len(a) > 1 else -1.0
    hi = float(a[2]) if len(a) > 2 else 1.0
    return ("clamp", (a[0], lo, hi), ())


def _cast(a, k):
    """x.to(dtype): only a dtype change (a layout, device or format change is not a value op)."""
    if set(k) - {"dtype", "layout", "device", "memory_format"} or "dtype" not in k:
        return None
    return ("cast", (a[0],), ())


def _rsub(a, k):
    return ("sub", (a[1], a[0]), ()) if k.get("alpha", 1) == 1 and len(a) == 2 else None


# aten op name (the packet, without overload) -> converter
POINTWISE_ATEN = {
    "add": _add_sub("add"), "sub": _add_sub("sub"), "mul": _binary("mul"), "div": _div,
    "rsub": _rsub,  # rsub(x, y) -> sub(y, x)
    "pow": lambda a, k: ("pow", (a[0], a[1]), ()),
    "minimum": _binary("minimum"), "maximum": _binary("maximum"), "fmod": _binary("fmod"),
    "gt": _binary("gt"), "lt": _binary("lt"), "ge": _binary("ge"), "le": _binary("le"),
    "eq": _binary("eq"), "ne": _binary("ne"),
    "logical_and": _binary("logical_and"), "logical_or": _binary("logical_or"),
    "clamp": _clamp,
    "clamp_min": lambda a, k: ("clamp", (a[0], a[1], None), ()),  # clamp_min(x, lo) -> clamp(x, lo, None)
    "clamp_max": lambda a, k: ("clamp", (a[0], None, a[1]), ()),  # clamp_max(x, hi) -> clamp(x, None, hi)
    "hardtanh": _hardtanh,  # hardtanh(x, lo, hi) -> clamp(x, lo, hi)
    "gelu": _gelu, "leaky_relu": _leaky_relu, "elu": _elu, "softplus": _softplus,
    "where": lambda a, k: ("where", tuple(a[:3]), ()),
    "masked_fill": lambda a, k: ("where", (a[1], a[2], a[0]), ()),  # masked_fill(x, m, v) -> where(m, v, x)
    "_to_copy": _cast,
    **{op: _same(op) for op in (
        "neg", "abs", "exp", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "reciprocal",
        "sin", "cos", "tan", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "sign",
        "relu", "silu", "mish", "hardswish", "hardsigmoid", "logical_not", "square")},
}


def _computed(dtype: str) -> bool:
    """A dtype the fuser computes in: float data, or bool masks."""
    return dtype in FLOAT_DTYPES or dtype == "bool"


def pointwise_node(n: torch.fx.Node, packet: str, name: str, shape, dtype, names, origin) -> Node | None:
    """The IR node for aten call `n` (op name `packet`) where it is a pointwise op the fuser computes, else None."""
    convert = POINTWISE_ATEN.get(packet)
    if convert is None or not _computed(dtype):
        return None
    try:
        got = convert(list(n.args), dict(n.kwargs))
    except (IndexError, TypeError, ValueError):
        return None
    if got is None:
        return None
    op, args, attrs = got
    for a in args:
        if isinstance(a, torch.fx.Node):
            v = val(a)
            if not _computed(dtype_name(v.dtype) if isinstance(v, torch.Tensor) else ""):
                return None  # integer tensors keep PyTorch's exact integer semantics
        elif a is not None and not isinstance(a, (int, float, bool)):
            return None
    args = tuple(float(a) if isinstance(a, int) and not isinstance(a, bool) else a for a in args)
    if op == "clamp":
        return _clamp_node(name, args, shape, dtype, names, origin)
    return Node(name, op, to_ir_arg(args, names), shape, dtype, attrs=attrs, origin=origin)


def _clamp_node(name, args, shape, dtype, names, origin) -> Node:
    """clamp(x, lo, hi) with both bounds; with one, maximum(x, lo) or minimum(x, hi). Each
    propagates NaN as torch.clamp does."""
    x, lo, hi = args
    if lo is not None and hi is not None:
        return Node(name, "clamp", (to_ir_arg(x, names), lo, hi), shape, dtype, origin=origin)
    if lo is not None:
        return Node(name, "maximum", (to_ir_arg(x, names), lo), shape, dtype, origin=origin)
    return Node(name, "minimum", (to_ir_arg(x, names), hi), shape, dtype, origin=origin)
