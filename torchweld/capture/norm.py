"""Capture of reductions, softmax and norms: aten calls -> the IR's anchor ops (ir.ANCHORS).

A call becomes an anchor only where the reduction kernel handles it exactly (float data, the
reduced dims one run in memory, unused saved statistics); anything else stays an aten call.
Eval-mode batch norm is pointwise: it becomes `(x - mean) * (weight * rsqrt(var + eps)) + bias`.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from torchweld.capture.meta import dtype_name, val
from torchweld.ir import KERNEL_DTYPES, VIEWS, Node, Ref, reduce_geometry

# Reductions whose aten call and IR op share a name and take (x, dims, keepdim) only.
PLAIN_REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "logsumexp"})


def _tensor_meta(v):
    return tuple(int(s) for s in v.shape), dtype_name(v.dtype), tuple(int(s) for s in v.stride())


def _dims(dims, ndim: int) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(ndim))  # NOTE: aten's empty dim list means every dim
    dims = [dims] if isinstance(dims, int) else list(dims)
    return tuple(sorted({d % ndim for d in dims}))


def _only_output0_used(n) -> bool:
    """A tuple-returning norm whose saved mean/rstd nobody reads."""
    return all(u.args[1] == 0 or not u.users for u in n.users)


def anchor_nodes(n, packet: str, name: str, names: dict, origin: str) -> list[Node] | None:
    """The IR nodes for fx node `n` (the last one is its value), or None to keep the aten call."""
    result = val(n)
    out = result[0] if isinstance(result, (tuple, list)) else result
    x = n.args[0] if n.args else None
    xv = val(x)
    if not isinstance(out, torch.Tensor) or not isinstance(xv, torch.Tensor) or xv.dim() == 0:
        return None
    shape, dtype, stride = _tensor_meta(out)
    xdtype = dtype_name(xv.dtype)
    a, k = list(n.args), dict(n.kwargs)
    target = str(n.target)
    ref = lambda v: Ref(names[v]) if isinstance(v, torch.fx.Node) else None  # noqa: E731
    if xdtype in KERNEL_DTYPES and target in INDEXED:
        return _indexed(n, a, k, target, name, ref(x), xv, origin)
    if dtype not in KERNEL_DTYPES or xdtype != dtype:
        return None

    def make(op, args, **attrs):
        node = Node(name, op, tuple(args), shape, dtype, attrs=tuple(sorted(attrs.items())), origin=origin,
                    stride=stride)
        return [node] if reduce_geometry(node, tuple(xv.shape)) is not None else None

    overloads = (f"aten.{packet}.dim_IntList", f"aten.{packet}.dim", f"aten.{packet}.default")
    if packet in PLAIN_REDUCTIONS and target in overloads:
        if k.get("dtype") is not None or (packet in ("sum", "mean") and target.endswith(".default") and len(a) > 1):
            return None
        dims = a[1] if len(a) > 1 else k.get("dim")
        keep = bool(a[2] if len(a) > 2 else k.get("keepdim", False))
        return make(packet, [ref(x)], dims=_dims(dims, xv.dim()), keepdim=keep)
    if target in ATTR_REDUCTIONS and k.get("dtype") is None:
        op, dims, keep, extra = ATTR_REDUCTIONS[target](a, k)
        if extra is None:
            return None
        made = make(op, [ref(x)], dims=_dims(dims, xv.dim()), keepdim=bool(keep), **extra)
        if made and target == "aten.var_mean.correction":
            v = made[0]
            made = [replace(v, attrs=v.attrs + (("item", 0),)),
                    Node(f"{name}_mean", "reduce_aux", (Ref(name), ref(x)), shape, dtype, origin=origin, stride=stride,
                         attrs=tuple(sorted({"what": "mean", "item": 1, **dict(v.attrs)}.items())))]
        return made
    if target in ("aten.cumsum.default", "aten.cumprod.default") and k.get("dtype") is None and a[1] is not None:
        return make(packet, [ref(x)], dims=_dims(a[1], xv.dim()))
    if target in ("aten._softmax.default", "aten._log_softmax.default") and not a[2]:
        return make(packet.lstrip("_"), [ref(x)], dims=_dims(a[1], xv.dim()))
    if target == "aten.native_layer_norm.default" and _only_output0_used(n):
        nd = len(a[1])
        if not _affine_ok(a[2], a[3], tuple(a[1])):
            return None
        return make("layer_norm", [ref(x), ref(a[2]), ref(a[3])], dims=tuple(range(xv.dim() - nd, xv.dim())),
                    eps=float(a[4]))
    if target == "aten.native_group_norm.default" and _only_output0_used(n):
        if not _affine_ok(a[1], a[2], (int(a[4]),)):
            return None
        return make("group_norm", [ref(x), ref(a[1]), ref(a[2])], groups=int(a[6]), eps=float(a[7]))
    if target == "aten.native_batch_norm.default" and _only_output0_used(n) and a[5]:
        got = _instance_norm(n, a, name, ref, origin)
        if got is not None:
            return got
    if target == "aten.native_batch_norm.default" and _only_output0_used(n) and xv.dim() >= 2:
        w, b, rm, rv, training, momentum, eps = a[1:8]
        if not _affine_ok(w, b, (xv.shape[1],)):
            return None
        if not training and dtype == "float32" and all(_is_f32_vec(v, xv.shape[1]) for v in (rm, rv)):
            return _batch_norm_eval(name, ref(x), ref(w), ref(b), ref(rm), ref(rv), float(eps), xv, shape,
                                    stride, origin)
        if training and isinstance(momentum, float) and all(_is_f32_vec(v, xv.shape[1]) for v in (rm, rv)):
            return make("batch_norm", [ref(x), ref(w), ref(b), ref(rm), ref(rv)], momentum=momentum, eps=float(eps))
    return None


def _correction(a, k):
    c = k.get("correction", 1)
    return {"correction": int(c if c is not None else 1)} if float(c if c is not None else 1).is_integer() else None


def _ord(a, k):
    o = float(a[1] if len(a) > 1 else k.get("ord", 2))
    return {"ord": o} if o in (1.0, 2.0, math.inf, -math.inf) else None


def _var(op):
    """var/std/var_mean(x, dim, correction=c, keepdim=k)."""
    return lambda a, k: (op, a[1] if len(a) > 1 else k.get("dim"), k.get("keepdim", False), _correction(a, k))


# aten reductions -> (op, dims, keepdim, extra attrs or None when not handled)
ATTR_REDUCTIONS = {
    "aten.prod.dim_int": lambda a, k: ("prod", a[1], a[2] if len(a) > 2 else k.get("keepdim", False), {}),
    "aten.linalg_vector_norm.default": lambda a, k: (
        "vector_norm", a[2] if len(a) > 2 else k.get("dim"), a[3] if len(a) > 3 else k.get("keepdim", False),
        _ord(a, k)),
    "aten.var.correction": _var("var"),
    "aten.std.correction": _var("std"),
    "aten.var_mean.correction": _var("var"),
}
# Reductions with an index result: argmax/argmin, and max/min over a dim (values, indices).
INDEXED = ("aten.argmax.default", "aten.argmin.default", "aten.max.dim", "aten.min.dim")


def _indexed(n, a, k, target, name, x, xv, origin) -> list[Node] | None:
    """argmax(x, dim) as one anchor; max(x, dim) as amax where only its values are read, else as
    argmax (the indices, getitem 1) with a companion for the values (getitem 0)."""
    dim = a[1] if len(a) > 1 else k.get("dim")
    keep = bool(a[2] if len(a) > 2 else k.get("keepdim", False))
    dims = _dims(dim, xv.dim())
    arg = "argmax" if "max" in target else "argmin"
    result = val(n)
    xshape, xdtype, _ = _tensor_meta(xv)
    if target.endswith(".dim"):
        vshape, _, vstride = _tensor_meta(result[0])
        indices_used = any(u.args[1] == 1 and u.users for u in n.users)
        if not indices_used:
            node = Node(name, "a" + arg[3:], (x,), vshape, xdtype, attrs=(("dims", dims), ("keepdim", keep)),
                        origin=origin, stride=vstride)
            return [node] if reduce_geometry(node, xshape) is not None else None
        anchor = Node(name, arg, (x,), vshape, "int64", attrs=(("dims", dims), ("item", 1), ("keepdim", keep)),
                      origin=origin, stride=vstride)
        if reduce_geometry(anchor, xshape) is None:
            return None
        values = Node(f"{name}_values", "reduce_aux", (Ref(name), x), vshape, xdtype, origin=origin, stride=vstride,
                      attrs=(("dims", dims), ("item", 0), ("keepdim", keep), ("what", arg[3:])))
        return [anchor, values]
    shape, _, stride = _tensor_meta(result)
    node = Node(name, arg, (x,), shape, "int64", attrs=(("dims", dims), ("keepdim", keep)) + (
        (("flat", True),) if dim is None else ()), origin=origin, stride=stride)
    return [node] if reduce_geometry(node, xshape) is not None else None


def _instance_norm(n, a, name, ref, origin) -> list[Node] | None:
    """F.instance_norm as traced: batch norm in training mode over x.view(1, N*C, ...), with the
    channel parameters and running statistics repeated N times. The anchor reads x itself and
    the (C,) parameters; it updates the repeated statistics in place as batch norm would (the
    graph then averages them over N into the module's buffers, as eager does)."""
    view, w, b, rm, rv, _, momentum, eps = a[:8]
    if not (isinstance(view, torch.fx.Node) and str(view.target) in VIEWS):
        return None
    x = view.args[0]
    xv, vv = val(x), val(view)
    if not isinstance(xv, torch.Tensor) or xv.dim() < 3 or vv.dim() < 2 or vv.shape[0] != 1:
        return None
    N, C = int(xv.shape[0]), int(xv.shape[1])
    if tuple(vv.shape[1:]) != (N * C,) + tuple(xv.shape[2:]) or not xv.is_contiguous() \
            or not isinstance(momentum, float):
        return None
    params = []
    for v in (w, b):
        if v is None:
            params.append(None)
            continue
        if not (isinstance(v, torch.fx.Node) and str(v.target) == "aten.repeat.default" and list(v.args[1]) == [N]
                and _affine_ok(v.args[0], None, (C,))):
            return None
        params.append(ref(v.args[0]))
    if (rm is None) != (rv is None) or (rm is not None and not all(_is_f32_vec(v, N * C) for v in (rm, rv))):
        return None
    shape, dtype, _ = _tensor_meta(xv)
    stride = tuple(int(s) for s in xv.stride())
    return [Node(name, "instance_norm", (ref(x), *params, ref(rm), ref(rv)), shape, dtype,
                 attrs=(("eps", float(eps)), ("momentum", momentum)), origin=origin, stride=stride)]


def _is_f32_vec(v, size: int) -> bool:
    t = val(v)
    return isinstance(t, torch.Tensor) and tuple(t.shape) == (size,) and t.dtype == torch.float32


def _affine_ok(w, b, shape: tuple) -> bool:
    """Weight and bias are absent or contiguous tensors of the normalised shape."""
    for v in (w, b):
        if v is None:
            continue
        t = val(v)
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape) or not t.is_contiguous():
            return False
    return True


def _batch_norm_eval(name, x, w, b, rm, rv, eps, xv, shape, stride, origin) -> list[Node]:
    """Running statistics make batch norm pointwise, with per-channel operands viewed as (C, 1, ...).

    NOTE: simplify/conv_fold.py (_bn_pointwise) matches these nodes as written here, to fold them
    into a convolution before them."""
    c = int(xv.shape[1])
    cshape = (c,) + (1,) * (xv.dim() - 2)
    nodes: list[Node] = []

    def node(op, args, shape_=cshape, dtype_="float32", target=""):
        nodes.append(Node(f"{name}_{len(nodes)}", op, tuple(args), shape_, dtype_, target=target, origin=origin))
        return Ref(nodes[-1].name)

    def view(v):
        return node("aten", [v, list(cshape)], target="aten.view.default")

    # NOTE: ATen's eval kernel computes (x - mean) * (invstd * weight) + bias, all fp32 here.
    scale = node("rsqrt", [node("add", [view(rv), eps])])
    if w is not None:
        scale = node("mul", [scale, view(w)])
    y = node("mul", [node("sub", [x, view(rm)], tuple(shape)), scale], tuple(shape))
    if b is not None:
        y = node("add", [y, view(b)], tuple(shape))
    last = nodes[-1]
    nodes[-1] = Node(name, last.op, last.args, last.shape, last.dtype, origin=origin, stride=stride)
    return nodes
