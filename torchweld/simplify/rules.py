"""Local rewrite rules on pointwise nodes, and the generic passes (dead code, CSE, in-place updates)."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from torchweld.ir import COMPARISONS, FLOAT_DTYPES, ROW_OPS, Graph, Node, Ref, broadcasts_to, format_node, map_refs

Rewrite = Callable[[Node, "Ctx"], "Node | Ref | None"]


class Ctx:
    """What a rule may look at: nodes by name and use counts (of the graph before the pass)."""

    def __init__(self, graph: Graph):
        self.nodes = graph.by_name()
        self.users = graph.users()

    def node(self, a):
        return self.nodes.get(a) if isinstance(a, Ref) else None

    def single_use(self, a) -> bool:
        return isinstance(a, Ref) and len(self.users.get(a, ())) == 1


def _const(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def _is(a, value: float) -> bool:
    return _const(a) and a == value


def _same_meta(n: Node, a, ctx: Ctx) -> bool:
    m = ctx.node(a)
    return m is not None and m.shape == n.shape and m.dtype == n.dtype


def _float(n: Node) -> bool:
    return n.is_pointwise and n.dtype in FLOAT_DTYPES


# --- local rules: (pattern, replacement), each returning None when it does not apply ---------

def _identity(n: Node, ctx: Ctx):
    a = n.args
    if not _float(n):
        return None
    if n.op == "mul" and _is(a[1], 1.0) and _same_meta(n, a[0], ctx):  # x*1 -> x
        return a[0]
    if n.op == "mul" and _is(a[0], 1.0) and _same_meta(n, a[1], ctx):  # 1*x -> x
        return a[1]
    if n.op in ("add", "sub") and _is(a[1], 0.0) and _same_meta(n, a[0], ctx):  # x+0 -> x
        return a[0]
    if n.op == "div" and _is(a[1], 1.0) and _same_meta(n, a[0], ctx):  # x/1 -> x
        return a[0]
    if n.op == "pow" and _is(a[1], 1.0) and _same_meta(n, a[0], ctx):  # x**1 -> x
        return a[0]
    if n.op == "cast" and _same_meta(n, a[0], ctx):  # x.to(x.dtype) -> x
        return a[0]
    inner = ctx.node(a[0])
    if n.op == "neg" and inner is not None and inner.op == "neg" and _same_meta(n, inner.args[0], ctx):  # --x -> x
        return inner.args[0]
    if n.op == "relu" and inner is not None and inner.op == "relu":  # relu(relu(x)) -> relu(x)
        return a[0]
    return None


def _functional_copy(n: Node, ctx: Ctx):
    """`copy(p, v)` -> `v`: functionalisation writes a module's `p.copy_(v)` as a copy taking p's place
    (then written back by `copy_(p, copy)`); where v already has p's shape, dtype and strides, it is
    the copy's value itself, and the write-back reads v (one pass fewer; emit.copies_into may then
    have the kernel that makes v write it into p)."""
    if n.op != "aten" or n.target != "aten.copy.default" or len(n.args) != 2 or any(v for _, v in n.attrs):
        return None
    v = ctx.node(n.args[1])
    if v is None or not _same_meta(n, n.args[1], ctx) or tuple(v.stride) != tuple(n.stride):
        return None
    return n.args[1]


_FILLS = {"aten.zeros_like.default": 0.0, "aten.ones_like.default": 1.0, "aten.zeros.default": 0.0,
          "aten.ones.default": 1.0, "aten.full_like.default": None, "aten.full.default": None}


def _fill_value(m: Node | None):
    """The number a fill call (zeros_like, full, ...) writes everywhere, or None."""
    if m is None or m.op != "aten" or m.target not in _FILLS:
        return None
    value = _FILLS[m.target]
    if value is None:
        value = m.args[1] if len(m.args) > 1 else None
    return float(value) if _const(value) or isinstance(value, bool) else None


def _fill_constants(n: Node, ctx: Ctx):
    """where(c, x, zeros_like(x)) -> where(c, x, 0.0): a tensor that holds one number everywhere is
    that number, when it has the dtype the op computes in and broadcasts to its shape."""
    if not n.is_pointwise or not (_float(n) or n.op in COMPARISONS):
        return None
    args, changed = list(n.args), False
    for i, a in enumerate(args):
        m = ctx.node(a)
        value = _fill_value(m)
        if value is None or not broadcasts_to(tuple(m.shape), tuple(n.shape)):
            continue
        others = [ctx.node(b) for j, b in enumerate(args) if j != i and isinstance(b, Ref)]
        want = n.dtype if n.op not in COMPARISONS else (others[0].dtype if others and others[0] else None)
        if m.dtype == want and (n.op != "where" or i > 0):
            args[i], changed = value, True
    return replace(n, args=tuple(args)) if changed else None


def _canonical(n: Node, ctx: Ctx):
    a = n.args
    if not _float(n):
        return None
    if n.op == "div" and _const(a[1]) and a[1] != 0 and math.isfinite(a[1]):  # x/c -> x*(1/c)
        return replace(n, op="mul", args=(a[0], 1.0 / a[1]))
    if n.op == "sub" and _const(a[1]):  # x-c -> x+(-c)
        return replace(n, op="add", args=(a[0], -a[1]))
    if n.op in ("add", "mul") and _const(a[0]) and isinstance(a[1], Ref):  # c+x -> x+c
        return replace(n, args=(a[1], a[0]))
    if n.op == "pow" and _is(a[1], 2.0):  # x**2 -> x*x (exactly what PyTorch computes)
        return replace(n, op="mul", args=(a[0], a[0]))
    if n.op == "square":  # square(x) -> x*x
        return replace(n, op="mul", args=(a[0], a[0]))
    return None


def _fma(n: Node, ctx: Ctx):
    """a*b + c -> fma(a, b, c): one rounding instead of two, and inf/NaN behave as before."""
    if not _float(n) or n.op != "add":
        return None
    for m_arg, c in ((n.args[0], n.args[1]), (n.args[1], n.args[0])):
        m = ctx.node(m_arg)
        if m is not None and m.op == "mul" and ctx.single_use(m_arg) and m.dtype == n.dtype:
            return replace(n, op="fma", args=(m.args[0], m.args[1], c))
    return None


_KEEPDIM_VIEWS = frozenset({"aten.unsqueeze.default", "aten.view.default", "aten.reshape.default",
                            "aten._unsafe_view.default"})


def _keepdim_view(n: Node, ctx: Ctx):
    """x.sum(-1)[:, None] -> x.sum(-1, keepdim=True): a view that only puts the reduced dims back
    as 1s is the keepdim result (the same values and order), which a row kernel can broadcast."""
    r = ctx.node(n.args[0]) if n.op == "aten" and n.target in _KEEPDIM_VIEWS and n.args else None
    if r is None or r.op not in ROW_OPS or r.attr("keepdim") or r.attr("flat") or not ctx.single_use(n.args[0]):
        return None
    x = ctx.node(r.args[0])
    dims = set(r.attr("dims", ()))
    keep = tuple(1 if d in dims else size for d, size in enumerate(x.shape)) if x is not None else None
    if keep != tuple(n.shape) or n.dtype != r.dtype:
        return None
    attrs = tuple(sorted({**dict(r.attrs), "keepdim": True}.items()))
    return replace(r, name=n.name, shape=keep, attrs=attrs, stride=n.stride)


def apply_rules(graph: Graph, rules: list[Rewrite], name: str) -> Graph:
    """Run local rules to a fixed point; each node's args are resolved through earlier rewrites."""
    for _ in range(8):
        ctx = Ctx(graph)
        subst: dict[str, object] = {}
        nodes, log = [], []
        for n in graph.nodes:
            n = replace(n, args=map_refs(n.args, lambda r: subst.get(r, r)))
            ctx.nodes[n.name] = n
            for rule in rules:
                out = rule(n, ctx)
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


def dead_code(graph: Graph) -> Graph:
    """Drop nodes nothing reads, keeping outputs, graph inputs and in-place aten calls."""
    live = set(graph.outputs)
    keep = []
    for n in reversed(graph.nodes):
        effect = n.op in ("input", "param") or (n.op == "aten" and "_." in n.target + ".")
        if n.name in live or effect:
            keep.append(n)
            live.update(n.inputs())
    return replace(graph, nodes=tuple(reversed(keep)))


def cse(graph: Graph) -> Graph:
    """Common subexpressions: pointwise nodes with equal op, args and attrs are computed once."""
    seen: dict[tuple, str] = {}
    subst: dict[str, object] = {}
    nodes, log = [], []
    for n in graph.nodes:
        n = replace(n, args=map_refs(n.args, lambda r: subst.get(r, r)))
        if n.is_pointwise:
            key = (n.op, n.args, n.attrs, n.shape, n.dtype)
            if key in seen:
                subst[n.name] = Ref(seen[key])
                log.append(f"cse: {n.name} is {seen[key]}")
                continue
            seen[key] = n.name
        nodes.append(n)
    outputs = tuple(subst.get(o, o) for o in graph.outputs)
    return replace(graph, nodes=tuple(nodes), outputs=outputs).with_log(*log)


def in_place_update(graph: Graph) -> Graph:
    """`copy_(p, add(p, c))` -> `add_(p, c)`: a counter update (batch norm's num_batches_tracked)
    in one library call instead of two (each call from Python costs several microseconds)."""
    ctx = Ctx(graph)
    nodes, log = [], []
    drop = set()
    for n in graph.nodes:
        src = ctx.node(n.args[1]) if n.target == "aten.copy_.default" and len(n.args) == 2 else None
        if (src is not None and src.target == "aten.add.Tensor" and src.args[0] == n.args[0]
                and _const(src.args[1]) and ctx.single_use(Ref(src.name)) and not src.attrs):
            drop.add(src.name)
            n = replace(n, target="aten.add_.Tensor", args=(n.args[0], src.args[1]))
            log.append(f"in_place: {n.name} = add_({n.args[0]}, {n.args[1]!r})")
        nodes.append(n)
    nodes = [n for n in nodes if n.name not in drop]
    return replace(graph, nodes=tuple(nodes)).with_log(*log)
