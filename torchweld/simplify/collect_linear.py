"""Algebra on elementwise chains: collect sums of scaled terms into one linear combination.

`((C + B) + C)` becomes `2*C + B`: the same terms with summed coefficients. This is exact up to
rounding and keeps NaN/inf behaviour: a term is never dropped, even when its coefficient sums to
zero (`x - x` stays `x*0`, which is NaN for an infinite x, as the reference gives).
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import FLOAT_DTYPES, Graph, Node, Ref, broadcast_shape
from torchweld.simplify.dead_code import dead_code
from torchweld.simplify.rewrite import is_number


def _linear(n: Node | None) -> bool:
    """add/sub of two values, neg, or a multiplication by a constant."""
    if n is None or n.dtype not in FLOAT_DTYPES:
        return False
    if n.op in ("add", "sub"):
        return any(isinstance(a, Ref) for a in n.args)
    if n.op == "neg":
        return True
    return n.op == "mul" and sum(is_number(a) for a in n.args) == 1


class LinearForm:
    """sum(coeff * term) + const, and how many nodes were absorbed into it."""

    def __init__(self):
        self.terms: dict[Ref, float] = {}
        self.const = 0.0
        self.absorbed = 0

    def add(self, term, coeff: float):
        if is_number(term):
            self.const += coeff * term
        else:
            self.terms[term] = self.terms.get(term, 0.0) + coeff


def collect_linear(graph: Graph) -> Graph:
    """Each sum of scaled terms, through values only it reads, as one linear combination."""
    nodes = graph.by_name()
    users = graph.users()

    def absorbable(a) -> bool:
        if not isinstance(a, Ref) or len(users[a]) != 1:
            return False
        m, user = nodes.get(a), nodes.get(users[a][0])
        return _linear(m) and _linear(user) and m.dtype == user.dtype

    def expand(a, coeff: float, form: LinearForm):
        m = nodes.get(a) if isinstance(a, Ref) else None
        if m is None or not absorbable(a):
            form.add(a, coeff)
            return
        form.absorbed += 1
        visit(m, coeff, form)

    def visit(n: Node, coeff: float, form: LinearForm):
        if n.op == "add":
            expand(n.args[0], coeff, form)
            expand(n.args[1], coeff, form)
        elif n.op == "sub":
            expand(n.args[0], coeff, form)
            expand(n.args[1], -coeff, form)
        elif n.op == "neg":
            expand(n.args[0], -coeff, form)
        else:  # mul by a constant
            c, x = (n.args[0], n.args[1]) if is_number(n.args[0]) else (n.args[1], n.args[0])
            expand(x, coeff * c, form)

    out, log = [], []
    for n in graph.nodes:
        if not _linear(n) or absorbable(Ref(n.name)):
            out.append(n)
            continue
        form = LinearForm()
        visit(n, 1.0, form)
        merged = len(form.terms) < sum(1 for _ in _walk_terms(n, nodes, absorbable))
        if form.absorbed == 0 and not merged:
            out.append(n)
            continue
        new = _rebuild(n, form, nodes)
        out.extend(new)
        log.append(f"collect_linear: {n.name} = {_show(form)}")
    return dead_code(replace(graph, nodes=tuple(out)).with_log(*log))


def _walk_terms(n, nodes, absorbable):
    """The terms of n's sum as written, before equal ones are merged."""
    for a in n.args:
        if isinstance(a, Ref):
            if absorbable(a):
                yield from _walk_terms(nodes[a], nodes, absorbable)
            else:
                yield a


def _show(form: LinearForm) -> str:
    """`2*v1 + v3 + 0.5`, for the log."""
    parts = [f"{c:g}*{t}" if c != 1 else str(t) for t, c in form.terms.items()]
    if form.const:
        parts.append(f"{form.const:g}")
    return " + ".join(parts)


def _rebuild(root: Node, form: LinearForm, nodes: dict) -> list[Node]:
    """Emit the form as a chain of add/sub/mul; the fma pass then merges each mul into its add."""
    out: list[Node] = []
    acc, shape = None, ()

    def add_node(op, args, node_shape):
        node = Node(f"{root.name}_{len(out)}", op, tuple(args), node_shape, root.dtype, origin=root.origin)
        out.append(node)
        return Ref(node.name)

    for term, c in form.terms.items():
        term_shape = nodes[term].shape
        shape = broadcast_shape(shape, term_shape) if acc is not None else term_shape
        if acc is None:
            acc = term if c == 1.0 else add_node("neg", [term], term_shape) if c == -1.0 else \
                add_node("mul", [term, c], term_shape)
        elif c == 1.0:
            acc = add_node("add", [acc, term], shape)
        elif c == -1.0:
            acc = add_node("sub", [acc, term], shape)
        else:
            acc = add_node("add", [acc, add_node("mul", [term, c], term_shape)], shape)
    if form.const != 0.0:
        acc = add_node("add", [acc, form.const], shape)
    if not out:  # a single existing term: the root stays, as `x*1` of it (canonical2 drops that where it may)
        return [replace(root, op="mul", args=(acc, 1.0))]
    return out[:-1] + [replace(out[-1], name=root.name, shape=root.shape)]

