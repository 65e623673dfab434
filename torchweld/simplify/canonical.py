"""Canonical forms: one way to write each pointwise computation, so that CSE finds equal values
and collect_linear sees sums and products by a constant."""
from __future__ import annotations

import math
from dataclasses import replace

from torchweld.simplify.rewrite import Num, Pat, Table, Var, pointwise

X, C = Var("x"), Num(name="c")


def _times_reciprocal(n, ctx, x, c):
    # NOTE: PyTorch's CUDA kernel divides by a number the same way (a * (1/b), the reciprocal taken
    # once on the host), so on the GPU this is the reference's own arithmetic (up to the rounding of
    # 1/c itself). Only a nonzero finite c: 1/0 has no value in Python; an infinite or NaN c stays.
    return replace(n, op="mul", args=(x, 1.0 / c)) if c != 0 and math.isfinite(c) else None


def _square(n, ctx, x):
    return replace(n, op="mul", args=(x, x))


CANONICAL: Table = (
    (pointwise("div", X, C), _times_reciprocal),  # x/c -> x*(1/c)
    (pointwise("sub", X, C), lambda n, ctx, x, c: replace(n, op="add", args=(x, -c))),  # x-c -> x+(-c)
    (pointwise(("add", "mul"), C, Pat(name="x")), lambda n, ctx, c, x: replace(n, args=(x, c))),  # c+x -> x+c
    (pointwise("pow", X, Num(2.0)), _square),  # x**2 -> x*x (what PyTorch itself computes for it)
    (pointwise("square", X), _square),  # square(x) -> x*x
)
