"""Algebra on elementwise chains: collect sums of scaled terms into one linear combination.

`((C + B) + C)` becomes `2*C + B`: the same terms with summed coefficients. This is exact up to
rounding and keeps NaN/inf behaviour: a term is never dropped, even when its coefficient sums to
zero (`x - x` stays `x*0`, which is NaN for an infinite x, as the reference gives).
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import FLOAT_DTYPES, Graph, Node, Ref, broadcast_shape, map_refs


def _const(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def _linear(n: Node | None) -> bool:
    """add/sub of two values, neg, or a multiplication by a constant."""
    if n is None or n.dtype not in FLOAT_DTYPES:
        return False
    if n.op in ("add", "sub"):
        return any(isinstance(a, Ref) for a in n.args)
    if n.op == "neg":
        return True
    return n.op == "mul" and sum(_const(a) for a in n.args) == 1


class _Form:
    def __init__(self):
        self.terms: dict[Ref, float] = {}
        self.const = 0.0
        self.absorbed = 0

    def add(self, term, coeff: float):
        if _const(term):
            self.const += coeff * term
        else:
            self.terms[term] = self.terms.get(term, 0.0) + coeff


def collect_linear(graph: Graph) -> Graph:
    nodes = graph.by_name()
    users = graph.users()

    def absorbable(a) -> bool:
        if not isinstance(a, Ref) or len(users[a]) != 1:
            return False
        m, user = nodes.get(a), nodes.get(users[a][0])
        return _linear(m) and _linear(user) and m.dtype == user.dtype

    def expand(a, coeff: float, form: _Form):
        m = nodes.get(a) if isinstance(a, Ref) else None
        if m is None or not absorbable(a):
            form.add(a, coeff)
            return
        form.absorbed += 1
        visit(m, coeff, form)

    def visit(n: Node, coeff: float, form: _Form):
        if n.op == "add":
            expand(n.args[0], coeff, form)
            expand(n.args[1], coeff, form)
        elif n.op == "sub":
            expand(n.args[0], coeff, form)
            expand(n.args[1], -coeff, form)
        elif n.op == "neg":
            expand(n.args[0], -coeff, form)
        else:  # mul by a constant
            c, x = (n.args[0], n.args[1]) if _const(n.args[0]) else (n.args[1], n.args[0])
            expand(x, coeff * c, form)

    out, log = [], []
    for n in graph.nodes:
        if not _linear(n) or absorbable(Ref(n.name)):
            out.append(n)
            continue
        form = _Form()
        visit(n, 1.0, form)
        merged = len(form.terms) < sum(1 for _ in _walk_terms(n, nodes, absorbable))
        if form.absorbed == 0 and not merged:
            out.append(n)
            continue
        new = _rebuild(n, form, nodes)
        out.extend(new)
        log.append(f"collect_linear: {n.name} = {_show(form)}")
    return dead_code_keep(replace(graph, nodes=tuple(out)).with_log(*log))


def _walk_terms(n, nodes, absorbable):
    for a in n.args:
        if isinstance(a, Ref):
            if absorbable(a):
                yield from _walk_terms(nodes[a], nodes, absorbable)
            else:
                yield a


def _show(form: _Form) -> str:
    parts = [f"{c:g}*{t}" if c != 1 else str(t) for t, c in form.terms.items()]
    if form.const:
        parts.append(f"{form.const:g}")
    return " + ".join(parts)


def _rebuild(root: Node, form: _Form, nodes: dict) -> list[Node]:
    """Emit the form as a chain of add/sub/mul; the fma pass then merges each mul into its add."""
    out: list[Node] = []
    acc, shape = None, ()

    def emit(op, args, shape_):
        node = Node(f"{root.name}_{len(out)}", op, tuple(args), shape_, root.dtype, origin=root.origin)
        out.append(node)
        return Ref(node.name)

    for term, c in form.terms.items():
        tshape = nodes[term].shape
        shape = broadcast_shape(shape, tshape) if acc is not None else tshape
        if acc is None:
            acc = term if c == 1.0 else emit("neg", [term], tshape) if c == -1.0 else emit("mul", [term, c], tshape)
        elif c == 1.0:
            acc = emit("add", [acc, term], shape)
        elif c == -1.0:
            acc = emit("sub", [acc, term], shape)
        else:
            acc = emit("add", [acc, emit("mul", [term, c], tshape)], shape)
    if form.const != 0.0:
        acc = emit("add", [acc, form.const], shape)
    if not out:  # the form is a single existing term: keep the root as an exact copy of it
        return [replace(root, op="mul", args=(acc, 1.0))]
    last = replace(out[-1], name=root.name, shape=root.shape)
    return out[:-1] + [replace(last, args=map_refs(last.args, lambda r: r))]


def dead_code_keep(graph: Graph) -> Graph:
    from torchweld.simplify.rules import dead_code

    return dead_code(graph)
