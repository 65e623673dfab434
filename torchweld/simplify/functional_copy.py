"""Functional copies: functionalisation writes a module's `p.copy_(v)` as a copy that takes p's
place (and is written back by `copy_(p, copy)`). Where v already has p's shape, dtype and strides,
the copy's value is v itself, and the write-back reads v: one pass over the data fewer (and the
kernel that makes v may then write it into p).
"""
from __future__ import annotations

from torchweld.simplify.rewrite import Pat, Table, Var, same_meta


def _source(n, ctx, p, v):
    """v, where the copy of it has v's shape, dtype and strides and no keyword (non_blocking) is set."""
    if any(value for _, value in n.attrs) or not same_meta(n, v, ctx) or tuple(ctx.node(v).stride) != tuple(n.stride):
        return None
    return v


FUNCTIONAL_COPY: Table = (
    (Pat("aten", (Var("p"), Pat(name="v")), target="aten.copy.default"), _source),  # copy(p, v) -> v
)
