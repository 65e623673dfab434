"""Row fusion: a reduction with the pointwise ops that read its result broadcast back over its rows.

`x - x.mean(-1, keepdim=True)`, `x * rsqrt((x*x).mean(-1, keepdim=True) + eps)`, `x / x.norm(...)`:
the reduce kernel reduces a row, then computes and writes every element of that row (the way a
softmax kernel does), instead of a second kernel reading the row again. Several reductions of the
same rows chain in one kernel (`exp(x - max) / sum(exp(x - max))`, a mean then a variance about it),
one pass over the row each (codegen/reduce_rows.py). This module is the policy the planner asks.
"""
from __future__ import annotations

from math import prod

from torchweld.tiling import ITEMSIZE, SMS, layout
from torchweld.ir import AUX, ROW_OPS, Node, Ref, ancestors_in, broadcasts_to, reduce_geometry

# Reductions of the same rows one kernel may chain: each is one more pass over the row.
MAX_ANCHORS = 4


def maps_to_rows(a: Node, in_shape: tuple) -> bool:
    """a's value broadcast to its input's shape gives output (o, i) to element (o, r, i): a keepdim
    result, or one whose reduced dims lead (a mean over dim 0 of a matrix)."""
    dims = set(a.attr("dims", ()))
    shape = tuple(a.shape)
    if len(shape) > len(in_shape):
        return False
    padded = (1,) * (len(in_shape) - len(shape)) + shape
    return all(padded[d] == (1 if d in dims else in_shape[d]) for d in range(len(in_shape)))


def row_anchor(a: Node, nodes: dict[str, Node]) -> bool:
    """A reduction whose result may be broadcast back over its rows inside its own kernel."""
    x = a.args[0] if a.args else None
    if a.op not in ROW_OPS or not isinstance(x, Ref) or x not in nodes:
        return False
    shape = tuple(nodes[x].shape)
    return (reduce_geometry(a, shape) is not None and prod(a.shape) < prod(shape)
            and maps_to_rows(a, shape))


def compatible(a: Node, b: Node, nodes: dict[str, Node]) -> bool:
    """Two reductions over the same rows of inputs of one shape, with results of one shape."""
    if not (row_anchor(a, nodes) and row_anchor(b, nodes)):
        return False
    sa, sb = tuple(nodes[a.args[0]].shape), tuple(nodes[b.args[0]].shape)
    return sa == sb and tuple(a.shape) == tuple(b.shape) and reduce_geometry(a, sa) == reduce_geometry(b, sb)


def splits(a: Node, nodes: dict[str, Node], sms: int = SMS) -> bool:
    """Few long rows: the reduce layout would split each over several blocks (a chain cannot)."""

    x = nodes[a.args[0]]
    O, R, I = reduce_geometry(a, tuple(x.shape))
    return layout(O, R, I, 16 // ITEMSIZE.get(x.dtype, 4), sms=sms).split > 1


def anchor_deps(members: list[str], nodes: dict[str, Node]) -> dict[str, bool]:
    """For members in topological order: does each depend on an anchor among them?"""
    dep: dict[str, bool] = {}
    for m in members:
        dep[m] = nodes[m].is_anchor or nodes[m].op == AUX or any(dep.get(r, False) for r in nodes[m].inputs())
    return dep


def members_ok(members: list[str], nodes: dict[str, Node], sms: int = SMS) -> bool:
    """A group that one row kernel can run: members in topological order, anchors first-to-last.

    Every anchor reduces the same rows; a value computed from an anchor's result has the result's
    shape (once per output) or the input's (once per element); other values broadcast to the input.
    """
    anchors = [m for m in members if nodes[m].is_anchor]
    if not anchors or len(anchors) > MAX_ANCHORS:
        return False
    first = nodes[anchors[0]]
    if not all(compatible(first, nodes[b], nodes) for b in anchors):
        return False
    if len(anchors) > 1 and splits(first, nodes, sms):
        return False
    full, small = tuple(nodes[first.args[0]].shape), tuple(first.shape)
    dep = anchor_deps(members, nodes)
    for m in members:
        n = nodes[m]
        if n.is_anchor:
            continue
        if n.op == AUX:
            if n.args[0] not in anchors:
                return False
        elif dep[m]:
            if tuple(n.shape) not in (small, full):
                return False
        elif not broadcasts_to(tuple(n.shape), full):
            return False
    return True


def is_row_kernel(members: list[str], nodes: dict[str, Node]) -> bool:
    """A reduce kernel that needs the row machinery: several anchors, values written per element,
    or a value at the output's shape computed from one of the input's (a bias the prologue reads too)."""
    anchors = [m for m in members if nodes[m].is_anchor]
    if not anchors or nodes[anchors[0]].op not in ROW_OPS:
        return False
    if len(anchors) > 1:
        return True
    a = nodes[anchors[0]]
    full = tuple(nodes[a.args[0]].shape)
    before = ancestors_in(a.name, set(members), nodes)
    for m in members:
        if m == a.name or m in before or nodes[m].op == AUX:
            continue
        if tuple(nodes[m].shape) == full and prod(full) > prod(a.shape):
            return True
        if any(r in before for r in nodes[m].inputs()):
            return True
    return False
