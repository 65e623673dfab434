"""Reduce rewrites: a sum or mean after a conv or matmul cuts the library op's own work.

Convs and matmuls are linear, so a sum over their output moves inside them:
summing a linear layer's output features is one matrix-vector product with the summed weight
rows; the global average of a 1x1 conv is that conv applied to the averaged input; a channel sum
of a conv is a conv with one summed filter; a bias (or any term added on the way) reduces on its
own (`mean(y + b) = mean(y) + b`, and `sum` counts it once per element it was broadcast over).

The sums of weights and biases are computed inside forward from the parameters, on every call.
They are never cached, because the parameters may change between calls.

NOTE: these rewrites reassociate sums, so they are exact up to rounding and are done only in
fp32/fp64 (fp16/bf16 round too coarsely), and only where every value between the library op and
the reduction is read by nothing else. NaN inputs still give NaN. An inf input may differ: where
the reference adds +inf and -inf (NaN), the rewrite may give an infinity.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from torchweld.ir import CONVOLUTION, VIEWS, Graph, Node, Ref, broadcasts_to, format_node, reduce_geometry
from torchweld.simplify.dead_code import dead_code

EXACT = ("float32", "float64")
MATMULS = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default")
ATEN_REDUCE = {"sum": "aten.sum.dim_IntList", "mean": "aten.mean.dim"}


@dataclass(frozen=True)
class Reduction:
    """A sum or mean (a fused anchor, or an aten call as in fp64) over `dims` of value `x`."""

    node: Node
    op: str  # "sum" | "mean"
    x: Node
    dims: tuple[int, ...]
    keepdim: bool


@dataclass(frozen=True)
class Term:
    """A smaller value added (broadcast) onto the library op's output on its way to the reduction."""

    ref: Ref
    last_dim_only: bool  # added before a view: only a vector along the last dim survives the view
    scales: tuple = ()  # ("mul" | "div", constant) applied after it was added, outermost first


def _scale(n: Node):
    """("mul", c) or ("div", c) for `n = y * c` / `y / c` with a constant c, else None."""
    a = n.args
    const = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if n.op == "mul" and len(a) == 2 and const(a[0]) and isinstance(a[1], Ref):
        return ("mul", float(a[0])), a[1]
    if n.op == "mul" and len(a) == 2 and const(a[1]) and isinstance(a[0], Ref):
        return ("mul", float(a[1])), a[0]
    if n.op == "div" and len(a) == 2 and isinstance(a[0], Ref) and const(a[1]):
        return ("div", float(a[1])), a[0]
    return None


def _norm_dims(dims, ndim: int) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return tuple(range(ndim))  # NOTE: aten's empty dim list means every dim
    dims = [dims] if isinstance(dims, int) else dims
    return tuple(sorted({d % ndim for d in dims}))


def as_reduction(n: Node, nodes: dict) -> Reduction | None:
    """The sum/mean `n` computes, if it is one of an fp32/fp64 value of the same dtype."""
    if n.dtype not in EXACT or not n.args or not isinstance(n.args[0], Ref):
        return None
    x = nodes[n.args[0]]
    if x.dtype != n.dtype or not x.shape:
        return None
    if n.op in ("sum", "mean"):
        return Reduction(n, n.op, x, tuple(n.attr("dims")), bool(n.attr("keepdim")))
    kw = dict(n.attrs)
    if n.op != "aten" or kw.get("dtype") is not None:
        return None
    if n.target == "aten.sum.default" and len(n.args) == 1:
        return Reduction(n, "sum", x, tuple(range(len(x.shape))), False)
    op = {"aten.sum.dim_IntList": "sum", "aten.mean.dim": "mean"}.get(n.target)
    if op is None:
        return None
    dims = n.args[1] if len(n.args) > 1 else kw.get("dim")
    keep = n.args[2] if len(n.args) > 2 else kw.get("keepdim", False)
    return Reduction(n, op, x, _norm_dims(dims, len(x.shape)), bool(keep))


@dataclass(frozen=True)
class Chain:
    """What lies under a reduction: the library op, the terms added and constant scales on the way."""

    core: Node
    terms: tuple[Term, ...]
    viewed: bool  # views between the library op and the reduction
    scales: tuple = ()  # outermost first: the reduction of the library op's output gets them all


def peel(reduction: Reduction, nodes: dict, users: dict) -> Chain | None:
    """Walk down from the reduced value through adds/subs of smaller broadcast terms, scalings by a
    constant and views, to a conv or matmul. Every value passed must have exactly one reader (the
    next one up), so nothing else needs it."""
    reader, cur, terms, viewed, scales = reduction.node.name, reduction.x, [], False, ()
    while True:
        if users[cur.name] != [reader] or cur.dtype != reduction.node.dtype:
            return None
        scale = _scale(cur)
        if scale is not None and nodes[scale[1]].shape == cur.shape:  # sum(c * y) = c * sum(y)
            scales += (scale[0],)
            reader, cur = cur.name, nodes[scale[1]]
        elif cur.op in ("add", "sub"):
            split = _split_add(cur, nodes)
            if split is None:
                return None
            full, term = split
            if cur.op == "sub" and full.name == cur.args[0]:  # y - t: the term counts negated
                terms.append(Term(term, viewed, scales + (("mul", -1.0),)))
            elif cur.op == "sub":  # t - y: the chain below counts negated
                terms.append(Term(term, viewed, scales))
                scales += (("mul", -1.0),)
            else:
                terms.append(Term(term, viewed, scales))
            reader, cur = cur.name, full
        elif cur.op == "aten" and cur.target in VIEWS:
            viewed = True
            reader, cur = cur.name, nodes[cur.args[0]]
        elif cur.op == "aten" and cur.target in MATMULS + (CONVOLUTION,):
            return Chain(cur, tuple(terms), viewed, scales)
        else:
            return None


def _split_add(n: Node, nodes: dict) -> tuple[Node, Ref] | None:
    """(the full-size operand, the smaller term broadcast onto it) of `n = add(a, b)` or `sub(a, b)`."""
    a, b = n.args
    if not (isinstance(a, Ref) and isinstance(b, Ref)):
        return None
    for full, term in ((a, b), (b, a)):
        f, t = nodes[full], nodes[term]
        if f.shape == n.shape and t.numel < n.numel and t.dtype == n.dtype and broadcasts_to(t.shape, n.shape):
            return f, term
    return None


class Replacement:
    """New nodes replacing a reduction; the last one takes the reduction's name."""

    def __init__(self, reduction: Reduction, nodes: dict, scales: tuple = ()):
        self.reduction = reduction
        self.known = dict(nodes)
        self.nodes: list[Node] = []
        self.scales = scales

    def scaled(self, x: Ref, scales: tuple) -> Ref:
        """x with the constant scalings of the chain, innermost first, as the reference applied them."""
        for op, c in reversed(scales):
            x = self.node(op, [x, c], self[x].shape)
        return x

    def __getitem__(self, ref) -> Node:
        return self.known[ref]

    def node(self, op, args, shape, target="", attrs=()) -> Ref:
        old = self.reduction.node
        name, shape = f"{old.name}_r{len(self.nodes)}", tuple(shape)
        stride = tuple(prod(shape[d + 1:]) for d in range(len(shape)))
        self.nodes.append(Node(name, op, tuple(args), shape, old.dtype, target=target, attrs=tuple(attrs),
                               origin=old.origin, stride=stride))
        self.known[name] = self.nodes[-1]
        return Ref(name)

    def aten(self, target, args, shape) -> Ref:
        return self.node("aten", args, shape, target=target)

    def view(self, x: Ref, shape) -> Ref:
        shape = tuple(shape)
        if self[x].shape == shape:
            return x
        if self[x].target == "aten.view.default" and self[x] in self.nodes:  # a view of our own view: one view
            x = self[x].args[0]  # NOTE: the inner view stays, unread, for dead_code to drop
        return self.aten("aten.view.default", [x, list(shape)], shape)

    def reduce(self, op: str, x: Ref, dims, keepdim: bool, fused: bool = False) -> Ref:
        """op over `dims` of x: a fused anchor where capture would make one (fp32), else an aten call."""
        dims, xs = tuple(sorted(dims)), self[x].shape
        shape = tuple(1 if d in dims else s for d, s in enumerate(xs) if keepdim or d not in dims)
        if fused and self[x].dtype == "float32":
            ref = self.node(op, [x], shape, attrs=(("dims", dims), ("keepdim", keepdim)))
            if reduce_geometry(self.nodes[-1], xs) is not None:
                return ref
            self.nodes.pop()
        return self.aten(ATEN_REDUCE[op], [x, list(dims), keepdim], shape)

    def close(self, main: Ref, terms: list[Term], rule: str) -> tuple[list[Node], str] | None:
        """main + each term's own reduction, named as the reduction it replaces."""
        values = _term_values(self, terms)
        if values is None:
            return None
        old, acc = self.reduction.node, self.scaled(main, self.scales)
        for t, term in zip(values, terms):
            acc = self.node("add", [acc, self.scaled(t, term.scales)], old.shape)
        last = self.nodes[-1]
        assert last.name == acc and last.shape == old.shape, (format_node(last), old.shape)
        self.nodes[-1] = replace(last, name=old.name, stride=old.stride or last.stride)
        return self.nodes, rule + (f", {len(values)} added term(s) reduced on their own" if values else "")


def _term_values(new: Replacement, terms: list[Term]) -> list[Ref] | None:
    """sum(y + t) = sum(y) + sum(t) (and so for mean): each term reduced over its own dims (a sum also
    multiplies it by the number of elements it was broadcast over), shaped to broadcast against the result."""
    reduction = new.reduction
    y, dims, out = reduction.x.shape, reduction.dims, []
    for term in terms:
        ref, t = term.ref, new[term.ref]
        if term.last_dim_only:  # added before a view that kept the last dim: only vectors along it map
            if t.numel == 1:
                ref = new.view(ref, ())
            elif t.shape[-1] == y[-1] and t.numel == y[-1]:
                ref = new.view(ref, (y[-1],))
            else:
                return None
        shape = new[ref].shape
        k = len(y) - len(shape)
        own = [d - k for d in dims if d >= k and shape[d - k] != 1]
        repeat = prod(y[d] for d in dims if d < k or shape[d - k] == 1)
        if own:
            ref = new.reduce(reduction.op, ref, own, True)
        padded = (1,) * k + new[ref].shape
        ref = new.view(ref, padded if reduction.keepdim else tuple(s for d, s in enumerate(padded) if d not in dims))
        if reduction.op == "sum" and repeat != 1:  # NOTE: after the view, so the multiply joins the final kernel
            ref = new.node("mul", [ref, float(repeat)], new[ref].shape)
        out.append(ref)
    return out


def _is_transpose(n: Node) -> bool:
    """`n` swaps the last two dims of its input (a weight read as W^T)."""
    if n.op != "aten":
        return False
    if n.target == "aten.t.default":
        return len(n.shape) == 2
    nd = len(n.shape)
    return n.target == "aten.transpose.int" and nd >= 2 and {n.args[1] % nd, n.args[2] % nd} == {nd - 2, nd - 1}


# --- rules: each returns (new nodes, what it did), or None where it does not apply ---------------

def _conv(reduction: Reduction, chain: Chain, nodes: dict):
    """A reduction over a convolution; the conv's own bias joins the added terms."""
    core, terms = chain.core, list(chain.terms)
    x, w, bias, stride, padding, _dilation, transposed, out_pad, groups = core.args
    nd, W = len(core.shape), nodes[w]
    if chain.viewed or W.dtype != core.dtype or nodes[x].dtype != core.dtype:
        return None
    new, spatial = Replacement(reduction, nodes, chain.scales), tuple(range(2, nd))
    one_by_one = W.shape[2:] == (1,) * (nd - 2) and all(s == 1 for s in stride) and not any(padding) \
        and not (transposed and any(out_pad))
    if bias is not None:
        terms = [Term(new.view(bias, (core.shape[1],) + (1,) * (nd - 2)), False, chain.scales)] + terms
    rest = list(core.args[3:])
    if reduction.dims == spatial and one_by_one:
        # mean_hw(conv1x1(x)) -> conv1x1(mean_hw(x)): the conv runs on one pixel per image
        pooled = new.reduce(reduction.op, x, spatial, True, fused=True)
        conv = new.aten(CONVOLUTION, [pooled, w, None, *rest], core.shape[:2] + (1,) * (nd - 2))
        main = new.view(conv, reduction.node.shape)
        return new.close(main, terms, f"1x1 conv of the {reduction.op} of {x} over its spatial dims")
    if reduction.dims == (1,) and groups == 1:
        # sum_c conv(x, W)[c] -> conv(x, sum_c W[c]): one output channel
        filt = new.reduce(reduction.op, w, (1,) if transposed else (0,), True)
        conv = new.aten(CONVOLUTION, [x, filt, None, *rest], (core.shape[0], 1) + core.shape[2:])
        main = new.view(conv, reduction.node.shape)
        return new.close(main, terms, f"conv of {x} with the {reduction.op} of its filters")
    if terms:
        # mean(conv(x) + b) -> mean(conv_nobias(x)) + b
        lib = new.aten(CONVOLUTION, [x, w, None, *rest], core.shape)
        main = new.reduce(reduction.op, lib, reduction.dims, reduction.keepdim, fused=reduction.node.op != "aten")
        return new.close(main, terms, f"{reduction.op} of the conv without bias")
    return None


def _matmul(reduction: Reduction, chain: Chain, nodes: dict):
    """A reduction over mm/addmm/bmm: over the output features (last dim), or over rows (not the last dim)."""
    core, terms, viewed = chain.core, list(chain.terms), chain.viewed
    if core.target == "aten.addmm.default":
        if core.attrs:  # alpha/beta scale the product and the bias: left alone
            return None
        bias, a, m = core.args
        if nodes[bias].dtype != core.dtype:
            return None
        terms = terms + [Term(bias, viewed, chain.scales)]
    else:
        a, m = core.args
    A, M = nodes[a], nodes[m]
    if A.dtype != core.dtype or M.dtype != core.dtype:
        return None
    y, last, new = reduction.x.shape, len(reduction.x.shape) - 1, Replacement(reduction, nodes, chain.scales)
    if reduction.dims == (last,) and y[-1] == core.shape[-1]:
        # sum_j (A @ B)[.., j] -> A @ sum_j B[:, j]: a matrix-vector product
        src, d = (M.args[0], len(M.shape) - 2) if _is_transpose(M) else (m, len(M.shape) - 1)
        # NOTE: a weight's reduction stays a call on parameters; an input's is work of its own, in a kernel
        col = new.reduce(reduction.op, src, (d,), False, fused=new[src].op != "param")
        if len(A.shape) == 2:
            out = new.aten("aten.mv.default", [a, col], A.shape[:1])
        else:
            out = new.aten("aten.bmm.default", [a, new.view(col, M.shape[:2] + (1,))], A.shape[:2] + (1,))
        return new.close(new.view(out, reduction.node.shape), terms, f"{a} @ ({reduction.op} of the columns of {m})")
    if not reduction.dims or last in reduction.dims:
        return None
    # sum_i (X @ B)[i, ..] -> (sum_i X[i]) @ B: the rows are reduced before the product
    if len(A.shape) == 3:
        if viewed or reduction.dims != (1,):
            return None
        rows = new.reduce(reduction.op, a, (1,), True, fused=True)
        out = new.aten("aten.bmm.default", [rows, m], (A.shape[0], 1, M.shape[-1]))
        return new.close(new.view(out, reduction.node.shape), terms, f"({reduction.op} of the rows of {a}) @ {m}")
    x = a
    if y[:-1] != A.shape[:-1]:  # A is a 2-D view of X: X's leading dims are y's
        X = nodes[A.args[0]] if A.op == "aten" and A.target in VIEWS else None
        if X is None or X.shape[:-1] != y[:-1] or X.shape[-1] != A.shape[-1]:
            return None
        x = A.args[0]
    kept = prod(s for d, s in enumerate(y[:-1]) if d not in reduction.dims)
    rows = new.view(new.reduce(reduction.op, x, reduction.dims, False, fused=True), (kept, A.shape[-1]))
    out = new.aten("aten.mm.default", [rows, m], (kept, M.shape[-1]))
    return new.close(new.view(out, reduction.node.shape), terms, f"({reduction.op} of the rows of {x}) @ {m}")


def reduce_rewrites(graph: Graph) -> Graph:
    """Every fp32/fp64 sum or mean over a conv or matmul (through single-reader adds and views)."""
    nodes, users = graph.by_name(), graph.users()
    out, log = [], []
    for n in graph.nodes:
        reduction = as_reduction(n, nodes)
        chain = peel(reduction, nodes, users) if reduction is not None else None
        made = None
        if chain is not None:
            made = (_conv if chain.core.target == CONVOLUTION else _matmul)(reduction, chain, nodes)
        if made is None:
            out.append(n)
            continue
        new, rule = made
        out += new
        log.append(f"reduce_rewrites: {n.name} = {reduction.op} over {list(reduction.dims)} of {chain.core.name} "
                   f"({chain.core.target.split('.')[1]}) -> {rule}")
    return dead_code(replace(graph, nodes=tuple(out)).with_log(*log)) if log else graph
