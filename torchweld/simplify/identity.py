"""Identities: an op that gives back its operand unchanged is that operand.

Each holds for every x, NaN and inf included. A rule fires only where x already has the result's
shape and dtype, so no broadcast and no type promotion goes with the op. NOTE: `x+0 -> x` keeps
x = -0.0 where the reference gives +0.0 (the two compare equal).
"""
from __future__ import annotations

from torchweld.simplify.rewrite import Num, Pat, Table, Var, pointwise, same_meta

X = Var("x")


def _operand(n, ctx, x):
    """x, where it may stand for n."""
    return x if same_meta(n, x, ctx) else None


IDENTITY: Table = (
    (pointwise("mul", X, Num(1.0)), _operand),  # x*1 -> x
    (pointwise("mul", Num(1.0), X), _operand),  # 1*x -> x
    (pointwise(("add", "sub"), X, Num(0.0)), _operand),  # x+0 -> x, x-0 -> x
    (pointwise("div", X, Num(1.0)), _operand),  # x/1 -> x
    (pointwise("pow", X, Num(1.0)), _operand),  # x**1 -> x
    (pointwise("cast", X), _operand),  # x.to(x.dtype) -> x
    (pointwise("neg", Pat("neg", (X,))), _operand),  # --x -> x
    # NOTE: the inner relu is the result whatever its dtype: relu keeps the dtype it is given
    (pointwise("relu", Pat("relu", name="inner")), lambda n, ctx, inner: inner),  # relu(relu(x)) -> relu(x)
)
