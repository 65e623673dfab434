"""Keepdim views: a view that only puts a reduction's reduced dims back as 1s is the keepdim result
(the same values in the same order), which a row kernel can broadcast."""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import ROW_OPS, VIEWS, Node
from torchweld.simplify.rewrite import Pat, Table

RESHAPES = VIEWS | {"aten.unsqueeze.default"}


def _keepdim_reduction(n: Node, ctx):
    """The reduction under view `n`, computed with keepdim=True and named as `n`."""
    r = ctx.node(n.args[0]) if n.args else None
    if r is None or r.op not in ROW_OPS or r.attr("keepdim") or r.attr("flat") or not ctx.single_use(n.args[0]):
        return None
    x = ctx.node(r.args[0])
    dims = set(r.attr("dims", ()))
    keep = tuple(1 if d in dims else size for d, size in enumerate(x.shape)) if x is not None else None
    if keep != tuple(n.shape) or n.dtype != r.dtype:
        return None
    attrs = tuple(sorted({**dict(r.attrs), "keepdim": True}.items()))
    return replace(r, name=n.name, shape=keep, attrs=attrs, stride=n.stride)


KEEPDIM: Table = (
    (Pat("aten", target=RESHAPES), _keepdim_reduction),  # x.sum(-1)[:, None] -> x.sum(-1, keepdim=True)
)
