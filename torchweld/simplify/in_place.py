"""In-place updates: `copy_(p, add(p, c))` -> `add_(p, c)`.

A counter update (batch norm's num_batches_tracked) then runs as one library call instead of two,
and each call from Python has a fixed cost of its own.
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import Graph, Ref
from torchweld.simplify.rewrite import Ctx, is_number


def in_place_update(graph: Graph) -> Graph:
    """Every `copy_(p, add(p, c))` whose add nothing else reads becomes `add_(p, c)`."""
    ctx = Ctx(graph)
    nodes, log = [], []
    drop = set()
    for n in graph.nodes:
        src = ctx.node(n.args[1]) if n.target == "aten.copy_.default" and len(n.args) == 2 else None
        if (src is not None and src.target == "aten.add.Tensor" and src.args[0] == n.args[0]
                and is_number(src.args[1]) and ctx.single_use(Ref(src.name)) and not src.attrs):
            drop.add(src.name)
            n = replace(n, target="aten.add_.Tensor", args=(n.args[0], src.args[1]))
            log.append(f"in_place: {n.name} = add_({n.args[0]}, {n.args[1]!r})")
        nodes.append(n)
    nodes = [n for n in nodes if n.name not in drop]
    return replace(graph, nodes=tuple(nodes)).with_log(*log)
