"""Fused multiply-add: a product read only by a sum joins it.

fma rounds once where `a*b + c` rounds twice, so the result is as close to exact or closer; NaN
stays NaN. NOTE: where a*b overflows and c pulls the exact sum back into range, the reference
gives inf (or NaN) and fma the finite sum. It runs last: the rules before it read muls and adds.
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.simplify.rewrite import Pat, Table, Var, pointwise

PRODUCT = Pat("mul", (Var("a"), Var("b")), name="m")


def _fuse(n, ctx, a, b, c, m):
    """fma(a, b, c), where nothing else reads the product and it has the sum's dtype."""
    return replace(n, op="fma", args=(a, b, c)) if ctx.single_use(m) and ctx.node(m).dtype == n.dtype else None


FMA: Table = (
    (pointwise("add", PRODUCT, Var("c")), _fuse),  # a*b + c -> fma(a, b, c)
    (pointwise("add", Var("c"), PRODUCT), _fuse),  # c + a*b -> fma(a, b, c)
)
