"""Dead code: nodes nothing reads are dropped."""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import Graph


def dead_code(graph: Graph) -> Graph:
    """Drop nodes nothing reads, keeping outputs, graph inputs and in-place aten calls."""
    live = set(graph.outputs)
    keep = []
    for n in reversed(graph.nodes):
        # NOTE: an aten call named with a trailing `_` (`add_`, `copy_`) writes into a tensor: it runs
        # even where nothing reads its result
        effect = n.op in ("input", "param") or (n.op == "aten" and "_." in n.target + ".")
        if n.name in live or effect:
            keep.append(n)
            live.update(n.inputs())
    return replace(graph, nodes=tuple(reversed(keep)))
