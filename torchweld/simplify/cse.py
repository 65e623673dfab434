"""Common subexpressions: pointwise nodes with equal op, args, attrs, shape and dtype are computed once,
and so are equal transposes (a loop's steps each take `W.t()` of one linear's weight)."""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import Graph, Ref, map_refs

# Views that only reorder dims: equal calls are the same view of the same tensor.
TRANSPOSES = frozenset({"aten.t.default", "aten.transpose.int", "aten.permute.default"})


def cse(graph: Graph) -> Graph:
    """Each pointwise value computed twice is read from its first node."""
    seen: dict[tuple, str] = {}
    subst: dict[str, object] = {}
    nodes, log = [], []
    for n in graph.nodes:
        n = replace(n, args=map_refs(n.args, lambda r: subst.get(r, r)))
        if n.is_pointwise or n.op == "aten" and n.target in TRANSPOSES:
            key = (n.op, n.target, n.args, n.attrs, n.shape, n.dtype)
            if key in seen:
                subst[n.name] = Ref(seen[key])
                log.append(f"cse: {n.name} is {seen[key]}")
                continue
            seen[key] = n.name
        nodes.append(n)
    outputs = tuple(subst.get(o, o) for o in graph.outputs)
    return replace(graph, nodes=tuple(nodes), outputs=outputs).with_log(*log)
