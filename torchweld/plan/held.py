"""Values forward builds from constants (and parameters) alone: a causal mask from ones(T, T).triu(1),
a relative-position index from arange and meshgrid, a bias gathered from a parameter through it.
Each is the same on every call, so the file makes them once per device and parameter version
(`_tw_held`) and forward's kernels read them as operands."""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import LIBRARY, VIEWS, Graph, Node, Ref

# Calls whose result shares its input's memory.
ALIASES = VIEWS | {"aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.expand.default",
                   "aten.unsqueeze.default", "aten.squeeze.dim", "aten.select.int", "aten.slice.Tensor",
                   "aten.alias.default", "aten.as_strided.default", "aten.unbind.int", "aten.split.Tensor"}
# Calls whose value differs between calls with the same arguments, or that write into a tensor.
_VARYING = ("rand", "bernoulli", "normal", "uniform", "dropout", "multinomial", "empty", "poisson", "exponential")


def _made_from_nothing(n: Node) -> bool:
    """An aten call that makes a tensor from numbers alone (arange, ones, full, a literal)."""
    return n.op == "aten" and not n.inputs() and not _varying(n)


def _varying(n: Node) -> bool:
    name = n.target.split(".")[1] if n.target.count(".") >= 1 else n.target
    return n.op == "aten" and (any(v in name for v in _VARYING) or name.endswith("_"))


def _work_on_state(n: Node) -> bool:
    """A call that does work on parameters and buffers alone and no other decision owns (a bias gathered
    through an index buffer); not a view, a GEMM (packed or folded elsewhere) or a pointwise op (which
    a kernel recomputes where it reads it)."""
    return n.op == "aten" and n.target not in ALIASES and n.target not in LIBRARY


def held_values(graph: Graph) -> tuple[str, ...]:
    """The nodes that read no input and depend on a tensor made from numbers or on work done on
    parameters alone (`_work_on_state`), in graph order."""
    nodes, users = graph.by_name(), graph.users()
    # NOTE: a value something writes into (copy_, add_, a norm's running statistics, which our kernels
    # may write without bumping its version) is not the same on every call, nor what is made from it
    written = {a for n in graph.nodes if _varying(n) for a in n.inputs()}
    written |= {a for n in graph.nodes if "batch_norm" in n.op + n.target or n.op == "instance_norm"
                for a in n.args[3:5] if isinstance(a, Ref)}
    rooted: set[str] = set()  # depends on a tensor made from numbers, and on no input
    for n in graph.nodes:
        if n.op in ("input", "param") or _varying(n) or n.op not in ("aten", "getitem") and not n.is_pointwise \
                and not n.is_anchor:
            continue
        ins = n.inputs()
        state = ins and all(a in rooted or nodes[a].op == "param" and a not in written for a in ins)
        if _made_from_nothing(n) or state and (any(a in rooted for a in ins) or _work_on_state(n)):
            rooted.add(n.name)
    # NOTE: one forward returns (or a view of it) is the caller's to write into
    written |= _returned(graph, nodes)
    return tuple(n.name for n in graph.nodes if n.name in rooted and n.name not in written)


def _returned(graph: Graph, nodes: dict) -> set[str]:
    """The outputs and the tensors they are views of."""
    out, stack = set(), list(graph.outputs)
    while stack:
        n = nodes[stack.pop()]
        if n.name not in out:
            out.add(n.name)
            if n.op == "aten" and n.target in ALIASES and n.inputs():
                stack.append(n.inputs()[0])
    return out


def masked(graph: Graph, held: tuple[str, ...]) -> Graph:
    """The graph the partitioner sees: held nodes as opaque calls, so that no kernel takes them in."""
    if not held:
        return graph
    keep = set(held)
    return replace(graph, nodes=tuple(replace(n, op="aten", target=n.target or f"held.{n.op}", attrs=())
                                      if n.name in keep else n for n in graph.nodes))


def held_outputs(graph: Graph, held: tuple[str, ...]) -> tuple[str, ...]:
    """The held values that something else reads (what `_tw_held` returns)."""
    keep, users = set(held), graph.users()
    return tuple(h for h in held if any(u == "<output>" or u not in keep for u in users[h]))
