"""Fill tensors as numbers: a tensor that holds one number everywhere (zeros_like, ones, full...)
read by a pointwise op is that number, so the op needs no tensor made for it.
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import COMPARISONS, FLOAT_DTYPES, POINTWISE, Node, Ref, broadcasts_to
from torchweld.simplify.rewrite import Pat, Table, is_number

# The fill calls, and the number each writes (None: its second argument).
FILLS = {"aten.zeros_like.default": 0.0, "aten.ones_like.default": 1.0, "aten.zeros.default": 0.0,
         "aten.ones.default": 1.0, "aten.full_like.default": None, "aten.full.default": None,
         "aten.new_zeros.default": 0.0, "aten.new_ones.default": 1.0}


def fill_value(m: Node | None) -> float | None:
    """The number a fill call writes everywhere, or None."""
    if m is None or m.op != "aten" or m.target not in FILLS:
        return None
    value = FILLS[m.target]
    if value is None:
        value = m.args[1] if len(m.args) > 1 else None
    return float(value) if is_number(value) or isinstance(value, bool) else None


def _numbers_for_fills(n: Node, ctx):
    """Each fill argument that has the dtype the op computes in and broadcasts to its shape, as its number."""
    if n.dtype not in FLOAT_DTYPES and n.op not in COMPARISONS:
        return None
    args, changed = list(n.args), False
    for i, a in enumerate(args):
        m = ctx.node(a)
        value = fill_value(m)
        if value is None or not broadcasts_to(tuple(m.shape), tuple(n.shape)):
            continue
        # NOTE: a comparison computes in its operands' dtype, not in its result's (bool)
        others = [ctx.node(b) for j, b in enumerate(args) if j != i and isinstance(b, Ref)]
        want = n.dtype if n.op not in COMPARISONS else (others[0].dtype if others and others[0] else None)
        # NOTE: a 0-d fill beside a tensor of more dims takes part in type promotion as a number does
        number_like = not m.shape and want in FLOAT_DTYPES and any(o is not None and o.shape for o in others)
        if (m.dtype == want or number_like) and (n.op != "where" or i > 0):  # NOTE: where's condition stays a tensor
            args[i], changed = value, True
    return replace(n, args=tuple(args)) if changed else None


FILL: Table = (
    (Pat(POINTWISE), _numbers_for_fills),  # where(c, x, zeros_like(x)) -> where(c, x, 0.0)
)
