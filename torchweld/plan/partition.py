"""Partition the graph into library calls and fused kernels.

A generic partitioner (union of producer/consumer pairs, kept acyclic) driven by one policy,
`can_fuse`. Pointwise values of a smaller, broadcast shape (a bias times two) are recomputed
inside the kernel that reads them instead of being written out. Each reduction, softmax or norm
(an anchor) then becomes a kernel of kind "reduce" that takes in the pointwise group producing
its input (a prologue, recomputed per read) and the groups consuming its result (an epilogue).
A pool becomes a kernel of kind "pool" in the same way, at its output shape.
A depthwise convolution becomes a kernel of kind "depthwise" with an epilogue only.
"""
from __future__ import annotations

from torchweld.ir import (AUX, COMPARISONS, CONCAT, CONV, FLOAT_DTYPES, POOL, REDUCTION, Graph, Kernel, Node, Plan, Ref,
                          ancestors_in, broadcasts_to, reduce_geometry)
from torchweld.plan.rows import is_row_kernel, members_ok, row_anchor
from torchweld.tiling import SMS

# What never fuses: everything that is not pointwise (library anchors, views, reductions for now).
NEVER_FUSED = frozenset({"input", "param", "aten", "getitem"})


def fusible(n: Node) -> bool:
    return n.op not in NEVER_FUSED and n.is_pointwise and (n.dtype in FLOAT_DTYPES or n.op in COMPARISONS)


def can_fuse(producer: Node, consumer: Node) -> bool:
    """Same iteration space: the producer's value is written once and read at the same index."""
    return fusible(producer) and fusible(consumer) and producer.shape == consumer.shape


class _Groups:
    """Union-find over node names, with the acyclicity check that every merge must pass."""

    def __init__(self, graph: Graph, sms: int):
        self.graph, self.sms = graph, sms
        self.nodes = graph.by_name()
        self.users = graph.users()
        self.parent = {n.name: n.name for n in graph.nodes}
        self.groups = {n.name: {n.name} for n in graph.nodes}  # root -> its members
        self.at = {n.name: i for i, n in enumerate(graph.nodes)}  # topological position

    def find(self, a: str) -> str:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def members(self, root: str) -> set[str]:
        return set(self.groups[root])

    def merge(self, a: str, b: str) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        group = self.members(ra) | self.members(rb)
        if self._leaves_and_returns(group):
            return False
        self.parent[rb] = ra
        self.groups[ra] |= self.groups.pop(rb)
        return True

    def _leaves_and_returns(self, group: set[str]) -> bool:
        """True if a path leaves the group and comes back (the merged kernel would wait on itself)."""
        # NOTE: such a path runs between two members in topological order: nodes after the last
        # member cannot lead back, so the search stops there (it stays local to a loop's step)
        last = max(self.at[m] for m in group)
        frontier = [u for m in group for u in self.users[m] if u not in group and u != "<output>"]
        seen = set()
        while frontier:
            n = frontier.pop()
            if n in seen or self.at[n] > last:
                continue
            seen.add(n)
            for u in self.users[n]:
                if u in group:
                    return True
                if u != "<output>":
                    frontier.append(u)
        return False


def partition(graph: Graph, sms: int = SMS) -> Plan:
    """The graph as fused kernels and the nodes left to PyTorch, in the order forward runs them, for a
    GPU of `sms` multiprocessors."""
    g = _Groups(graph, sms)
    nodes = g.nodes
    for n in graph.nodes:
        for a in n.inputs():
            if a in nodes and can_fuse(nodes[a], n):
                g.merge(a, n.name)
    _inline_broadcast_groups(g)
    for n in graph.nodes:
        if n.is_anchor:
            _attach(g, n)
    kernels, unit_of = [], {}
    roots: dict[str, None] = {}
    in_group: dict[str, list[str]] = {}
    for n in graph.nodes:
        r = g.find(n.name)
        in_group.setdefault(r, []).append(n.name)
        if fusible(n) or n.is_anchor:
            roots.setdefault(r)
    for r in roots:
        members = in_group[r]
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


def _attach(g: _Groups, anchor: Node) -> None:
    """Merge an anchor with the groups reading its result, then with the group making its input.

    A reduction also takes groups that read its result broadcast back over its rows, and a prologue
    that holds another reduction of the same rows (rows.py): one kernel then reduces and writes.
    """
    nodes, users = g.nodes, g.users
    full = anchor.op in ("softmax", "log_softmax", "cumsum", "cumprod", "layer_norm", "group_norm", "instance_norm", "batch_norm")
    rows = row_anchor(anchor, nodes)
    aux = [u for u in users[anchor.name] if u != "<output>" and nodes[u].op == AUX]
    for u in aux:  # a second result (max's values, var_mean's mean) comes from the same kernel
        g.merge(anchor.name, u)
    for u in dict.fromkeys(users[anchor.name] + [r for a in aux for r in users[a]]):
        if u == "<output>" or not fusible(nodes[u]) or g.find(u) == g.find(anchor.name):
            continue
        group = g.members(g.find(u))
        if not any(nodes[m].is_anchor for m in group) and all(
                broadcasts_to(nodes[m].shape, anchor.shape) for m in group):
            g.merge(anchor.name, u)
        elif rows and _rows_ok(g, group | g.members(g.find(anchor.name))):
            g.merge(anchor.name, u)
    if anchor.op in CONV or anchor.op in CONCAT:
        return  # NOTE: the convolution reads its input tile as stored, a concatenation its parts: no prologue
    x = anchor.args[0]
    if not isinstance(x, Ref) or x not in nodes or not fusible(nodes[x]) or g.find(x) == g.find(anchor.name):
        return
    prologue = g.members(g.find(x))
    mine = g.members(g.find(anchor.name))
    readers_ok = set(prologue) | {anchor.name} | set(aux) | ((mine - {anchor.name}) if full or rows else set())
    if any(nodes[m].is_anchor for m in prologue) and not (rows and _rows_ok(g, prologue | mine)):
        return
    if anchor.op in POOL and not _worth_recomputing(anchor, [nodes[m] for m in prologue], nodes[x].shape):
        return
    if all(broadcasts_to(nodes[m].shape, nodes[x].shape) for m in prologue) and all(
            u in readers_ok for m in prologue for u in users[m]):
        g.merge(anchor.name, x)


def _rows_ok(g: _Groups, members: set[str]) -> bool:
    """One row kernel could run these members (rows.members_ok), in the graph's order."""
    order = [n.name for n in g.graph.nodes if n.name in members]
    return members_ok(order, g.nodes, g.sms)


# Ops a few instructions long: a pool may recompute them for every window that reads an element.
CHEAP = frozenset({"add", "sub", "mul", "div", "neg", "fma", "abs", "relu", "minimum", "maximum", "clamp", "where",
                   "leaky_relu", "hardswish", "hardsigmoid", "cast", "floor", "ceil", "round", "trunc", "sign"}) | COMPARISONS


def window_reads(anchor: Node, in_shape: tuple) -> int:
    """About how many windows of a pool read each input element (how often a prologue is recomputed)."""
    d = len(anchor.attr("out", anchor.attr("kernel", ())))
    if anchor.op.startswith("adaptive"):  # windows of In/Out positions, one more where they overlap
        return _numel(-(-o // i) + (1 if i % o else 0) for i, o in zip(in_shape[-d:], anchor.shape[-d:]))
    span = [(k - 1) * dil + 1 for k, dil in zip(anchor.attr("kernel"), anchor.attr("dilation", (1,) * d))]
    return _numel(-(-w // s) for w, s in zip(span, anchor.attr("stride")))


def _worth_recomputing(anchor: Node, prologue: list[Node], in_shape: tuple) -> bool:
    """A prologue joins a pool unless windows overlap a lot and it holds costly math (exp, erf...):
    recomputing it per read would then cost more than writing it once and reading it back."""
    return window_reads(anchor, in_shape) <= 4 or all(m.op in CHEAP for m in prologue)


def _kernel(name: str, members: list[str], graph: Graph, g: _Groups) -> Kernel | None:
    nodes = g.nodes
    anchors = [m for m in members if nodes[m].is_anchor]
    if anchors and nodes[anchors[0]].op in POOL:
        return _pool_kernel(name, members, anchors[0], g)
    if anchors and nodes[anchors[0]].op in CONV:
        return _depthwise_kernel(name, members, anchors[0], g)
    if anchors and nodes[anchors[0]].op in CONCAT:
        return _concat_kernel(name, members, anchors[0], g)
    if anchors:
        return _reduce_kernel(name, members, anchors[0], graph, g)
    shape = max((nodes[m].shape for m in members), key=lambda s: (_numel(s), len(s)))
    if _numel(shape) == 0:
        return None
    inputs, outputs = _boundary(members, nodes, g.users)
    if any(nodes[o].shape != shape for o in outputs):
        return None  # a smaller value is needed elsewhere: leave this group to PyTorch
    return Kernel(name, tuple(members), tuple(inputs), outputs, shape)


def _boundary(members: list[str], nodes: dict, users: dict) -> tuple[list[str], tuple[str, ...]]:
    """What a group reads from outside (in first-use order), and which of its values are read outside."""
    member_set = set(members)
    inputs: list[str] = []
    for m in members:
        for a in nodes[m].inputs():
            if a not in member_set and a not in inputs:
                inputs.append(a)
    return inputs, tuple(m for m in members if any(u not in member_set for u in users[m]))


def _reduce_kernel(name: str, members: list[str], anchor: str, graph: Graph, g: _Groups) -> Kernel | None:
    nodes = g.nodes
    member_set = set(members)
    a = nodes[anchor]
    x = nodes[a.args[0]]
    if reduce_geometry(a, x.shape) is None:
        return None
    inputs, outputs = _boundary(members, nodes, g.users)
    if is_row_kernel(members, nodes):
        if not members_ok(members, nodes, g.sms) or any(
                tuple(nodes[o].shape) not in (tuple(x.shape), tuple(a.shape)) for o in outputs):
            return None  # NOTE: the planner builds no such group; a guard for the codegen's assumptions
        return Kernel(name, tuple(members), tuple(inputs), outputs, tuple(x.shape), "reduce", anchor, g.sms)
    before = ancestors_in(anchor, member_set, nodes)
    after = {m for m in member_set - before - {anchor} if nodes[m].op != AUX}
    if a.op in REDUCTION and any(r in before for m in after for r in nodes[m].inputs()):
        return None  # an epilogue at the reduced shape cannot read a value of the full shape
    return Kernel(name, tuple(members), tuple(inputs), outputs, tuple(x.shape), "reduce", anchor, g.sms)


def _pool_kernel(name: str, members: list[str], anchor: str, g: _Groups) -> Kernel | None:
    """A pool with its prologue (at the input shape) and epilogue (at the pooled shape)."""
    nodes = g.nodes
    a = nodes[anchor]
    inputs, outputs = _boundary(members, nodes, g.users)
    before = ancestors_in(anchor, set(members), nodes)
    if any(r in before for m in set(members) - before - {anchor} for r in nodes[m].inputs()):
        return None  # an epilogue at the pooled shape cannot read a value of the input's shape
    if any(nodes[o].shape != a.shape for o in outputs):
        return None  # a smaller value is needed elsewhere: leave this group to PyTorch
    return Kernel(name, tuple(members), tuple(inputs), outputs, tuple(nodes[a.args[0]].shape), "pool", anchor)


def _depthwise_kernel(name: str, members: list[str], anchor: str, g: _Groups) -> Kernel | None:
    """The convolution and its epilogue, where the kernel has a tiling for its shapes; else None
    (the convolution then runs in PyTorch)."""
    from torchweld.tiling import geometry, tiling

    nodes = g.nodes
    a = nodes[anchor]
    inputs, outputs = _boundary(members, nodes, g.users)
    if ancestors_in(anchor, set(members), nodes) or any(nodes[o].shape != a.shape for o in outputs):
        return None
    if tiling(geometry(a, nodes)) is None:
        return None
    return Kernel(name, tuple(members), tuple(inputs), outputs, tuple(a.shape), "depthwise", anchor)


def _concat_kernel(name: str, members: list[str], anchor: str, g: _Groups) -> Kernel | None:
    """A concatenation and its epilogue, at the result's shape (of kind "reduce", as a scan is: one
    anchor, codegen's concat kind)."""
    nodes = g.nodes
    a = nodes[anchor]
    inputs, outputs = _boundary(members, nodes, g.users)
    if any(nodes[o].shape != a.shape for o in outputs) or _numel(a.shape) == 0:
        return None
    return Kernel(name, tuple(members), tuple(inputs), outputs, tuple(a.shape), "reduce", anchor)


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
