"""Plan: partition the graph into library calls and fused pointwise kernels.

A generic partitioner (union of producer/consumer pairs, kept acyclic) driven by one policy,
`can_fuse`. Pointwise values of a smaller, broadcast shape (a bias times two) are recomputed
inside the kernel that reads them instead of being written out.
"""
from __future__ import annotations

from dataclasses import dataclass

from torchweld.ir import COMPARISONS, FLOAT_DTYPES, Graph, Node, Ref, broadcasts_to

# What never fuses: everything that is not pointwise (library anchors, views, reductions for now).
NEVER_FUSED = frozenset({"input", "param", "aten", "getitem"})


@dataclass(frozen=True)
class Kernel:
    """One fused kernel: member nodes in order, tensors read, values written, iteration shape."""

    name: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    graph: Graph
    kernels: tuple[Kernel, ...]
    steps: tuple[str, ...]  # execution order: node names (run in PyTorch) and kernel names

    def kernel(self, name: str) -> Kernel | None:
        return next((k for k in self.kernels if k.name == name), None)


def fusible(n: Node) -> bool:
    return n.op not in NEVER_FUSED and n.is_pointwise and (n.dtype in FLOAT_DTYPES or n.op in COMPARISONS)


def can_fuse(producer: Node, consumer: Node) -> bool:
    """Same iteration space: the producer's value is written once and read at the same index."""
    return fusible(producer) and fusible(consumer) and producer.shape == consumer.shape


class _Groups:
    """Union-find over node names, with the acyclicity check that every merge must pass."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes = graph.by_name()
        self.users = graph.users()
        self.parent = {n.name: n.name for n in graph.nodes}

    def find(self, a: str) -> str:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def members(self, root: str) -> set[str]:
        return {n for n in self.parent if self.find(n) == root}

    def merge(self, a: str, b: str) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        group = self.members(ra) | self.members(rb)
        if self._leaves_and_returns(group):
            return False
        self.parent[rb] = ra
        return True

    def _leaves_and_returns(self, group: set[str]) -> bool:
        """True if a path leaves the group and comes back (the merged kernel would wait on itself)."""
        frontier = [u for m in group for u in self.users[m] if u not in group and u != "<output>"]
        seen = set()
        while frontier:
            n = frontier.pop()
            if n in seen:
                continue
            seen.add(n)
            for u in self.users[n]:
                if u in group:
                    return True
                if u != "<output>":
                    frontier.append(u)
        return False


def plan(graph: Graph) -> Plan:
    g = _Groups(graph)
    nodes = g.nodes
    for n in graph.nodes:
        for a in n.inputs():
            if a in nodes and can_fuse(nodes[a], n):
                g.merge(a, n.name)
    _inline_broadcast_groups(g)
    kernels, unit_of = [], {}
    roots = []
    for n in graph.nodes:
        r = g.find(n.name)
        if fusible(n) and r not in roots:
            roots.append(r)
    for r in roots:
        members = [n.name for n in graph.nodes if g.find(n.name) == r]
        k = _kernel(f"k{len(kernels)}", members, graph, g)
        if k is None:
            continue
        kernels.append(k)
        for m in members:
            unit_of[m] = k.name
    return Plan(graph, tuple(kernels), _schedule(graph, unit_of))


def _inline_broadcast_groups(g: _Groups) -> None:
    """Merge a group of smaller shape into the one group that reads it, if it broadcasts there."""
    changed = True
    while changed:
        changed = False
        for root in {g.find(n) for n in g.parent if fusible(g.nodes[n])}:
            members = g.members(root)
            shape = g.nodes[root].shape
            readers = {g.find(u) for m in members for u in g.users[m] if u != "<output>" and g.find(u) != root}
            outside = any(u == "<output>" or not fusible(g.nodes[u]) for m in members for u in g.users[m])
            if len(readers) != 1 or outside:
                continue
            target = readers.pop()
            big = g.nodes[target].shape
            if shape != big and broadcasts_to(shape, big) and g.merge(target, root):
                changed = True
                break


def _kernel(name: str, members: list[str], graph: Graph, g: _Groups) -> Kernel | None:
    nodes = g.nodes
    member_set = set(members)
    shape = max((nodes[m].shape for m in members), key=lambda s: (_numel(s), len(s)))
    if _numel(shape) == 0:
        return None
    inputs: list[str] = []
    for m in members:
        for a in nodes[m].inputs():
            if a not in member_set and a not in inputs:
                inputs.append(a)
    outputs = tuple(m for m in members if any(u not in member_set for u in g.users[m]))
    if any(nodes[o].shape != shape for o in outputs):
        return None  # a smaller value is needed elsewhere: leave this group to PyTorch
    return Kernel(name, tuple(members), tuple(inputs), outputs, shape)


def _numel(shape) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _schedule(graph: Graph, unit_of: dict[str, str]) -> tuple[str, ...]:
    """Topological order of units (a kernel or a single node), preferring the original order."""
    unit = lambda name: unit_of.get(name, name)  # noqa: E731
    order = {}
    deps: dict[str, set[str]] = {}
    for i, n in enumerate(graph.nodes):
        u = unit(n.name)
        order.setdefault(u, i)
        deps.setdefault(u, set()).update(unit(a) for a in n.inputs() if unit(a) != u)
    done, steps = set(), []
    pending = sorted(deps, key=order.get)
    while pending:
        for u in pending:
            if deps[u] <= done:
                steps.append(u)
                done.add(u)
                pending.remove(u)
                break
        else:
            raise AssertionError("cycle in kernel plan")
    return tuple(steps)


def describe(plan_: Plan) -> str:
    """The plan as Python: library calls as they are, each kernel as one call, ops underneath."""
    from torchweld.ir import format_node

    nodes = plan_.graph.by_name()
    lines = ["def forward(...):"]
    for step in plan_.steps:
        k = plan_.kernel(step)
        if k is None:
            n = nodes[step]
            if n.op in ("input", "param"):
                continue
            note = "  [library]" if n.target in _library_targets() else ""
            lines.append("    " + format_node(n) + note)
            continue
        shape = "x".join(map(str, k.shape))
        lines.append(f"    {', '.join(k.outputs)} = {k.name}({', '.join(k.inputs)})"
                     f"  # fused: {len(k.nodes)} ops over {shape}")
        for m in k.nodes:
            lines.append("        # " + format_node(nodes[m]).split("  #")[0])
    outs = ", ".join(plan_.graph.outputs)
    lines.append(f"    return {outs}")
    return "\n".join(lines)


def _library_targets():
    from torchweld.ir import LIBRARY

    return LIBRARY


__all__ = ["Kernel", "Plan", "plan", "can_fuse", "describe", "NEVER_FUSED", "Ref"]
