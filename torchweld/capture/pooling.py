"""Capture of pooling: aten max/avg/adaptive pooling calls -> the IR's pool anchors (ir.POOL).

A call becomes an anchor only where the pool kernel reproduces it exactly: float data, a max
pool's indices unused, and an output shape that PyTorch's own size rule gives. ATen writes 1-d
pools as unsqueeze -> 2-d pool -> squeeze; those become one 1-d pool of the unsqueeze's input, so
a prologue before it can fuse. A global pool (one window covering the pooled dims) of a tensor
whose pooled dims are innermost in memory becomes a mean/amax reduction instead: the reduce
kernel reads each row with threads side by side, where one thread per output would walk the row
alone. Over channels-last data the pool kernel (channels side by side) is the coalesced one.
"""
from __future__ import annotations

import operator
from math import prod

import torch

from torchweld.capture.meta import dtype_name, val
from torchweld.ir import KERNEL_DTYPES, Node, Ref

_TARGETS = {  # aten target -> (pool op, number of pooled dims)
    **{f"aten.max_pool{d}d{v}.default": ("max_pool", d) for d in (1, 2, 3) for v in ("", "_with_indices")},
    **{f"aten.avg_pool{d}d.default": ("avg_pool", d) for d in (1, 2, 3)},
    **{f"aten.{u}adaptive_avg_pool{d}d.default": ("adaptive_avg_pool", d) for d in (1, 2, 3) for u in ("", "_")},
    **{f"aten.adaptive_max_pool{d}d.default": ("adaptive_max_pool", d) for d in (1, 2, 3)},
}
_SQUEEZE = ("aten.squeeze.dim", "aten.squeeze.dims")


def out_size(size: int, k: int, s: int, p: int, dil: int, ceil: bool) -> int:
    """PyTorch's pooling output size: a ceil_mode window must start inside the input or left padding."""
    out = (size + 2 * p - dil * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _call_args(n: torch.fx.Node) -> dict:
    """The call's arguments by schema name, defaults filled in."""
    out = {}
    for i, arg in enumerate(n.target._schema.arguments):
        if i < len(n.args):
            out[arg.name] = n.args[i]
        elif arg.name in n.kwargs:
            out[arg.name] = n.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _expand(v, d: int) -> tuple[int, ...] | None:
    v = [v] if isinstance(v, int) else list(v)
    if len(v) == 1:
        v = v * d
    return tuple(int(x) for x in v) if len(v) == d and all(isinstance(x, int) for x in v) else None


def _unused(n: torch.fx.Node) -> bool:
    """Nothing that reaches forward's result or mutates state reads n."""
    return all(u.op == "call_function" and not _mutates(u) and _unused(u) for u in n.users)


def _mutates(n: torch.fx.Node) -> bool:
    parts = str(n.target).split(".")
    return len(parts) == 3 and parts[1].endswith("_")


def _norm_dim(d, ndim: int) -> int | None:
    if isinstance(d, (list, tuple)):
        if len(d) != 1:
            return None
        d = d[0]
    return d % ndim if isinstance(d, int) else None


def _innermost(t: torch.Tensor, d: int) -> bool:
    """The last d dims are dense and innermost in memory (size-1 dims aside)."""
    expect = 1
    for size, stride in zip(reversed(t.shape[-d:]), reversed(t.stride()[-d:])):
        if size != 1 and stride != expect:
            return False
        expect *= size
    return True


def pool_nodes(n: torch.fx.Node, name: str, names: dict, origin: str) -> tuple[list[Node], list] | None:
    """The IR node for pool call `n` and the fx nodes that alias it (the squeezes of a 1-d pool),
    or None to keep the aten call."""
    target = str(n.target)
    if target not in _TARGETS:
        return None
    op, d = _TARGETS[target]
    result = val(n)
    if isinstance(result, (tuple, list)):
        values = [u for u in n.users if u.target is operator.getitem and u.args[1] == 0]
        if any(not _unused(u) for u in n.users if u not in values):
            return None  # a max pool's indices are used: PyTorch computes them
        out, readers = result[0], [r for v in values for r in v.users]
    else:
        out, readers = result, list(n.users)
    x = n.args[0]
    xv = val(x)
    if not isinstance(out, torch.Tensor) or not isinstance(xv, torch.Tensor) or xv.dim() not in (d + 1, d + 2):
        return None
    dtype = dtype_name(out.dtype)
    if dtype not in KERNEL_DTYPES or xv.dtype != out.dtype or 0 in xv.shape or 0 in out.shape:
        return None
    got = _attrs(op, d, _call_args(n), tuple(xv.shape), tuple(out.shape))
    if got is None:
        return None
    attrs, trivial, whole = got
    aliases: list = []
    shape, stride = tuple(out.shape), tuple(out.stride())
    if d == 2 and trivial[0] and attrs.get("divisor") is None and _one_d(x, readers, out.dim()):
        # unsqueeze(x, -2) -> 2-d pool over (1, L) -> squeeze(-2): a 1-d pool of x
        x, d = x.args[0], 1
        xv = val(x)
        attrs = {key: (v[1:] if isinstance(v, tuple) else v) for key, v in attrs.items()}
        shape = shape[:-2] + shape[-1:]
        stride = tuple(val(readers[0]).stride()) if readers else stride[:-2] + stride[-1:]
        aliases = readers
    if whole and (_innermost(xv, d) or _few_long_rows(shape, prod(xv.shape[-d:]))):
        reduce_op = "amax" if "max" in op else "mean"
        dims = tuple(range(xv.dim() - d, xv.dim()))
        node = Node(name, reduce_op, (Ref(names[x]),), shape, dtype,
                    attrs=(("dims", dims), ("keepdim", True)), origin=origin, stride=stride)
        return [node], aliases
    node = Node(name, op, (Ref(names[x]),), shape, dtype, attrs=tuple(sorted(attrs.items())), origin=origin,
                stride=stride)
    return [node], aliases


def _attrs(op: str, d: int, a: dict, in_shape: tuple, out_shape: tuple):
    """(attrs, which dims pool nothing, whether one window covers the input), or None where the
    call is not one the kernel reproduces (the size rule must give the captured output shape)."""
    if op.startswith("adaptive"):
        out = _expand(a["output_size"], d)
        if out is None or tuple(out_shape[-d:]) != out:
            return None
        return {"out": out}, [o == 1 for o in out], all(o == 1 for o in out)
    k = _expand(a["kernel_size"], d)
    s = _expand(a["stride"], d) if a["stride"] else k
    p = _expand(a["padding"], d)
    dil = _expand(a.get("dilation", 1), d)
    if None in (k, s, p, dil) or a.get("divisor_override") == 0:
        return None
    ceil = bool(a["ceil_mode"])
    if tuple(out_size(in_shape[-d + i], k[i], s[i], p[i], dil[i], ceil) for i in range(d)) != tuple(out_shape[-d:]):
        return None
    attrs = {"kernel": k, "stride": s, "padding": p, "ceil_mode": ceil}
    if op == "max_pool":
        attrs["dilation"] = dil
    else:
        attrs["count_include_pad"] = bool(a["count_include_pad"])
        if a.get("divisor_override") is not None:
            attrs["divisor"] = int(a["divisor_override"])
    trivial = [k[i] == 1 and s[i] == 1 and p[i] == 0 and dil[i] == 1 for i in range(d)]
    whole = k == tuple(in_shape[-d:]) and not any(p) and set(dil) == {1} and not attrs.get("divisor")
    return attrs, trivial, whole


def _one_d(x, readers: list, ndim: int) -> bool:
    """The pool reads unsqueeze(v, -2) and every reader squeezes dim -2 away again."""
    return _unsqueezed(x) and all(r.op == "call_function" and str(r.target) in _SQUEEZE
                                  and _norm_dim(r.args[1], ndim) == ndim - 2 for r in readers)


def _few_long_rows(out_shape: tuple, window: int) -> bool:
    """Too few outputs to fill a GPU with one thread each, every one a long serial loop: a block
    of threads per row (the reduce kernel) wins even where its reads are strided."""
    return prod(out_shape) < 16384 and window > 64


def _unsqueezed(x) -> bool:
    """x = unsqueeze(v, -2): a 1-d input seen as (..., 1, L)."""
    if not isinstance(x, torch.fx.Node) or str(x.target) != "aten.unsqueeze.default":
        return False
    xv = val(x)
    return isinstance(xv, torch.Tensor) and _norm_dim(x.args[1], xv.dim()) == xv.dim() - 2


def spatial_reduction_as_pool(node: Node, x) -> Node:
    """A keepdim mean/amax over the last 1-3 dims of channels-last data -> a global adaptive pool.

    The reduce kernel would read each row with a stride of C; the pool kernel reads the channels
    side by side. Over data whose reduced dims are innermost, the reduction stays."""
    xv = val(x)
    if node.op not in ("mean", "amax") or not node.attr("keepdim") or not isinstance(xv, torch.Tensor):
        return node
    dims, nd = tuple(node.attr("dims")), xv.dim()
    d = len(dims)
    if not 1 <= d <= 3 or nd not in (d + 1, d + 2) or dims != tuple(range(nd - d, nd)) or _innermost(xv, d):
        return node
    if _few_long_rows(node.shape, prod(xv.shape[-d:])):
        return node
    op = "adaptive_avg_pool" if node.op == "mean" else "adaptive_max_pool"
    return Node(node.name, op, node.args, node.shape, node.dtype, attrs=(("out", (1,) * d),), origin=node.origin,
                stride=node.stride)
