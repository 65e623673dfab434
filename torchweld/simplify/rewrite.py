"""What the passes share: a small pattern matcher for local rules, the pass that applies rule tables,
and predicates on arguments.

A rule is `(pattern, build)`: where `pattern` matches a node, `build(node, ctx, **bound)` returns its
replacement (a Node, or a Ref to an existing value) or None when the rule does not apply after all.
A table is a tuple of rules; a node takes the first rule of a table that returns something, as
tinygrad's PatternMatcher does.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from torchweld.ir import FLOAT_DTYPES, Graph, Node, Ref, format_node, map_refs
from torchweld.simplify.dead_code import dead_code


class Ctx:
    """What a rule may look at: nodes by name (rewritten ones included) and use counts (of the graph
    before the pass)."""

    def __init__(self, graph: Graph):
        self.nodes = graph.by_name()
        self.users = graph.users()

    def node(self, a) -> Node | None:
        return self.nodes.get(a) if isinstance(a, Ref) else None

    def single_use(self, a) -> bool:
        return isinstance(a, Ref) and len(self.users.get(a, ())) == 1


def is_number(a) -> bool:
    """A Python number as an argument (a bool is a flag, not a number)."""
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def same_meta(n: Node, a, ctx: Ctx) -> bool:
    """`a` is a value of n's shape and dtype, so it may stand for n (nothing broadcast, no cast dropped)."""
    m = ctx.node(a)
    return m is not None and m.shape == n.shape and m.dtype == n.dtype


# --- patterns -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Var:
    """Any argument (a value or a constant), bound as `name`."""

    name: str


@dataclass(frozen=True)
class Num:
    """A number argument, equal to `value` where one is given; bound as `name` where one is given."""

    value: float | None = None
    name: str | None = None


@dataclass(frozen=True)
class Pat:
    """A node: its op (one name or a set), its aten target (one or a set), a pattern per argument
    (None: any arguments), its dtypes; a nested Pat matches the node an argument refers to.
    `name` binds the Ref to the node (nested) or is unused (at the top)."""

    op: str | frozenset | None = None
    args: tuple | None = None
    target: str | frozenset | None = None
    dtypes: frozenset | None = None
    name: str | None = None


def _among(value, want) -> bool:
    return want is None or (value == want if isinstance(want, str) else value in want)


def _bind(bound: dict, name: str | None, value) -> bool:
    """Bind `name` to `value`; a name bound twice must see the same argument both times."""
    if name is None:
        return True
    if name in bound:
        return bound[name] == value
    bound[name] = value
    return True


def _match_arg(pat, a, ctx: Ctx, bound: dict) -> bool:
    if isinstance(pat, Var):
        return _bind(bound, pat.name, a)
    if isinstance(pat, Num):
        return is_number(a) and (pat.value is None or a == pat.value) and _bind(bound, pat.name, a)
    m = ctx.node(a)
    return m is not None and match(pat, m, ctx, bound) and _bind(bound, pat.name, a)


def match(pat: Pat, n: Node, ctx: Ctx, bound: dict) -> bool:
    """Does `n` match `pat`? Fills `bound` with the names the pattern binds."""
    if not (_among(n.op, pat.op) and _among(n.target, pat.target)) or (pat.dtypes and n.dtype not in pat.dtypes):
        return False
    if pat.args is None:
        return True
    return len(n.args) == len(pat.args) and all(_match_arg(p, a, ctx, bound) for p, a in zip(pat.args, n.args))


def pointwise(op: str | tuple, *args) -> Pat:
    """A floating-point pointwise node: the only kind the algebraic rules rewrite (integer tensors
    keep PyTorch's integer semantics)."""
    return Pat(op if isinstance(op, str) else frozenset(op), tuple(args), dtypes=FLOAT_DTYPES)


Build = Callable[..., "Node | Ref | None"]
Table = tuple[tuple[Pat, Build], ...]


def rewrite(table: Table, n: Node, ctx: Ctx) -> Node | Ref | None:
    """The first replacement a rule of `table` gives for `n`, or None."""
    for pat, build in table:
        bound: dict = {}
        if match(pat, n, ctx, bound):
            out = build(n, ctx, **bound)
            if out is not None:
                return out
    return None


# --- the pass -------------------------------------------------------------------------------

def apply_rules(graph: Graph, tables: list[Table], name: str) -> Graph:
    """Run rule tables to a fixed point. On each node the tables are tried in order, each on what the
    one before made of it, until one replaces the node by an existing value; each node's args are
    resolved through earlier rewrites."""
    for _ in range(8):
        ctx = Ctx(graph)
        subst: dict[str, object] = {}
        nodes, log = [], []
        for n in graph.nodes:
            n = replace(n, args=map_refs(n.args, lambda r: subst.get(r, r)))
            ctx.nodes[n.name] = n
            for table in tables:
                out = rewrite(table, n, ctx)
                if out is None:
                    continue
                log.append(f"{name}: {format_node(n).split('  #')[0]}  ->  "
                           + (str(out) if isinstance(out, Ref) else format_node(out).split('  #')[0]))
                if isinstance(out, Ref):
                    subst[n.name] = out
                    n = None
                    break
                n = out
                ctx.nodes[n.name] = n
            if n is not None:
                nodes.append(n)
        outputs = tuple(subst.get(o, o) for o in graph.outputs)
        new = replace(graph, nodes=tuple(nodes), outputs=outputs).with_log(*log)
        if not log:
            return dead_code(new)
        graph = dead_code(new)
    return graph


def rule_pass(name: str, *tables: Table) -> Callable[[Graph], Graph]:
    """The pass that applies `tables` (see apply_rules), logging each rewrite under `name`."""

    def run(graph: Graph) -> Graph:
        return apply_rules(graph, list(tables), name)

    run.__name__ = name
    return run
