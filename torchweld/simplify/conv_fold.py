"""Fold the per-channel affine ops that follow a convolution into its weight and bias.

    conv(x, W, b) -> batch_norm (eval) -> * c -> + p    becomes    conv(x, W', b')

with W'[o] = W[o] * s[o] and b' = b * s + t per output channel o, where `y -> y * s + t` is the chain
of ops folded: an eval-mode batch norm (s = gamma / sqrt(var + eps), t = beta - mean * s), a product
or quotient by a nonzero finite number, a product by a per-channel parameter or buffer, and sums or
differences with a number or a per-channel parameter (a chain of sums alone is left as it is).
Batch norm is matched as capture/norm.py writes it in fp32 (pointwise) and as the aten call that fp16
and bf16 data keep. Library convolutions (1d-3d, transposed: output channels are the weight's dim 1
within each group) take W' and b' as their weight and bias; a depthwise kernel reads them.
The kernel after the convolution then has less to do, and where nothing else follows no kernel is
left. NOTE: PyTorch adds a library convolution's bias in a pass of its own, so that pass stays
where the fold leaves a bias and nothing follows; fold_library_bias moves it into a kernel that does.

W' and b' are not parameters: the state dict stays the original's. The emitted file computes them
at run time (`_tw_fold` in runtime/fold.py), in float64 rounded once to the weight's dtype,
once per version and address of every tensor they come from, so an optimizer step or
load_state_dict folds again. The batch norm's mode is in forward's guard (emit/module.py,
_norm_modes): in training mode the original forward runs.

NOTE: exact up to rounding (a few ulp: the products are reassociated), not bit for bit; where the
reference's convolution overflows to inf before a zero scale (gamma = 0) the folded one gives 0.
A chain is folded only where each value on it is read by the next op alone, so no other reader
needs an unfolded value. Weights and biases must be parameters (not computed in forward).
"""
from __future__ import annotations

import math
from dataclasses import replace

from torchweld.ir import CONVOLUTION, FLOAT_DTYPES, VIEWS, Graph, Node, Ref, format_arg
from torchweld.simplify.dead_code import dead_code

FOLD = "conv_fold"  # the IR op: (W', b') from the weight, the bias and the folded stages
# Batch norm as an aten call: the index of its `training` argument (None: an overload for eval only).
BN_ATEN = {"aten.native_batch_norm.default": 5, "aten._native_batch_norm_legit_no_training.default": None}
SCALES = ("bn", "mul", "div")  # a chain holding none of these (sums alone) is not worth a fold


def _number(a, nonzero: bool) -> bool:
    return (isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)
            and (a != 0 or not nonzero))


def _conv_parts(n: Node, nodes: dict):
    """(weight, bias, transposed, groups) of a convolution whose weight and bias are parameters."""
    if n.op == "aten" and n.target == CONVOLUTION and len(n.args) == 9 and not n.attrs:
        _, w, b, _, _, _, transposed, _, groups = n.args
    elif n.op == "depthwise_conv":
        _, w, b = n.args
        transposed, groups = False, n.attr("groups")
    else:
        return None
    # NOTE: batched only (an unbatched convolution's channels are its dim 0)
    if n.dtype not in FLOAT_DTYPES or not isinstance(w, Ref) or len(n.shape) < 3 \
            or len(n.shape) != len(nodes[w].shape):
        return None
    for p in (w, b):
        if p is not None and (not isinstance(p, Ref) or nodes[p].op != "param" or nodes[p].dtype != n.dtype):
            return None
    return w, b, bool(transposed), int(groups)


def _channel_tensor(a, conv: Node, nodes: dict, same_dtype: bool = True) -> Ref | None:
    """The parameter behind `a` where `a` holds one value per output channel of `conv` (or one for
    all), broadcast along dim 1: a parameter or buffer, or a view of one."""
    m = nodes.get(a) if isinstance(a, Ref) else None
    if m is None:
        return None
    p = nodes[m.args[0]] if m.op == "aten" and m.target in VIEWS and isinstance(m.args[0], Ref) else m
    if p.op != "param" or p.dtype not in FLOAT_DTYPES or (same_dtype and p.dtype != conv.dtype):
        return None
    nd = len(conv.shape)
    if len(m.shape) > nd:
        return None
    shape = (1,) * (nd - len(m.shape)) + tuple(m.shape)
    if any(s != 1 for d, s in enumerate(shape) if d != 1) or shape[1] not in (1, conv.shape[1]) or p.numel != shape[1]:
        return None
    return Ref(p.name)


def _sole_reader(name: str, users: dict, nodes: dict) -> Node | None:
    readers = users[name]
    return nodes[readers[0]] if len(readers) == 1 and readers[0] != "<output>" else None


def _bn_pointwise(cur: str, u: Node, conv: Node, nodes: dict, users: dict):
    """`(y - mean) * (rsqrt(var + eps) [* gamma]) [+ beta]`, as capture/norm.py (_batch_norm_eval) writes it."""
    if u.op != "sub" or u.args[0] != cur:
        return None
    mean = _channel_tensor(u.args[1], conv, nodes)
    mul = _sole_reader(u.name, users, nodes)
    if mean is None or mul is None or mul.op != "mul" or mul.args[0] != u.name or not isinstance(mul.args[1], Ref):
        return None
    s, gamma = nodes[mul.args[1]], None
    if s.op == "mul" and isinstance(s.args[0], Ref):
        gamma = _channel_tensor(s.args[1], conv, nodes)
        if gamma is None:
            return None
        s = nodes[s.args[0]]
    eps_add = nodes.get(s.args[0]) if s.op == "rsqrt" and isinstance(s.args[0], Ref) else None
    if eps_add is None or eps_add.op != "add" or not _number(eps_add.args[1], False):
        return None
    var = _channel_tensor(eps_add.args[0], conv, nodes)
    if var is None or any(nodes[t].numel != conv.shape[1] for t in (mean, var, gamma) if t is not None):
        return None
    last, beta = mul, None
    nxt = _sole_reader(mul.name, users, nodes)
    module = nodes[mean].target.rpartition(".")[0]
    if nxt is not None and nxt.op == "add" and nxt.args[0] == mul.name and not nxt.attrs:
        b = _channel_tensor(nxt.args[1], conv, nodes)
        if b is not None and nodes[b].target == f"{module}.bias".lstrip("."):
            last, beta = nxt, b
    return ("bn", mean, var, gamma, beta, float(eps_add.args[1])), [u, mul] + ([last] if beta else [])


def _bn_aten(cur: str, u: Node, conv: Node, nodes: dict, users: dict):
    """`native_batch_norm(y, gamma, beta, mean, var, training=False, ...)[0]` (fp16/bf16 data)."""
    if u.op != "aten" or u.target not in BN_ATEN or u.args[0] != cur or u.attrs:
        return None
    train = BN_ATEN[u.target]
    if train is not None and u.args[train] is not False:
        return None
    gamma, beta, mean, var = u.args[1:5]
    if mean is None or var is None or not _number(u.args[-1], False):
        return None
    for r in (gamma, beta, mean, var):  # NOTE: any float dtype: the fold computes in float64
        p = nodes.get(r) if isinstance(r, Ref) else None
        if r is not None and (p is None or p.op != "param" or p.dtype not in FLOAT_DTYPES
                              or tuple(p.shape) != conv.shape[1:2]):
            return None
    item = _sole_reader(u.name, users, nodes)
    if item is None or item.op != "getitem" or item.args[1] != 0 or item.shape != conv.shape:
        return None
    return ("bn", mean, var, gamma, beta, float(u.args[-1])), [u, item]


def _affine(cur: str, u: Node, conv: Node, nodes: dict):
    """`y * c`, `y / c`, `y + c`, `y - c` with a number c, or `y * p`, `y + p`, `y - p` with a per-channel p."""
    if u.op not in ("mul", "div", "add", "sub") or len(u.args) != 2 or u.attrs:
        return None
    if u.shape != conv.shape or u.dtype != conv.dtype or u.args[0] == u.args[1]:
        return None
    a, b = u.args
    if u.op in ("mul", "add") and b == cur:
        a, b = b, a
    if a != cur:
        return None
    if _number(b, nonzero=u.op in ("mul", "div")):
        return (u.op, float(b)), [u]
    t = _channel_tensor(b, conv, nodes) if u.op != "div" else None  # NOTE: no division by a value that may be 0
    return ((u.op, t), [u]) if t is not None else None


def _chain(conv: Node, nodes: dict, users: dict) -> tuple[list[tuple], list[Node]]:
    """The stages that fold into `conv`, and the nodes they replace (each read by the next alone)."""
    stages, spine, cur = [], [], conv.name
    while True:
        u = _sole_reader(cur, users, nodes)
        got = u and (_bn_pointwise(cur, u, conv, nodes, users) or _bn_aten(cur, u, conv, nodes, users)
                     or _affine(cur, u, conv, nodes))
        if not got:
            break
        stages.append(got[0])
        spine += got[1]
        cur = got[1][-1].name
    return stages, spine


def has_shift(bias, stages) -> bool:
    """The folded convolution has a bias: it had one, or a stage adds something."""
    return bias is not None or any(s[0] in ("bn", "add", "sub") for s in stages)


def fold_conv_affine(graph: Graph) -> Graph:
    """Each convolution with the per-channel affine chain after it folded into its weight and bias."""
    nodes, users = graph.by_name(), graph.users()
    out, log, dropped = [], [], set()
    for n in graph.nodes:
        if n.name in dropped:
            continue
        parts = _conv_parts(n, nodes)
        stages, spine = _chain(n, nodes, users) if parts else ([], [])
        if not any(s[0] in SCALES for s in stages):  # NOTE: sums alone save nothing: the bias add stays in the kernel
            out.append(n)
            continue
        w, b, transposed, groups = parts
        weight, last = nodes[w], spine[-1]
        fold = Node(f"{last.name}_fold", FOLD, (w, b, *stages), (), "tuple", origin=n.origin,
                    attrs=(("groups", groups), ("transposed", transposed)))
        folded_w = Node(f"{last.name}_w", "getitem", (Ref(fold.name), 0), weight.shape, weight.dtype,
                         origin=n.origin, stride=weight.stride)
        new = [fold, folded_w]
        bias = None
        if has_shift(b, stages):
            new.append(Node(f"{last.name}_b", "getitem", (Ref(fold.name), 1), (n.shape[1],), n.dtype, origin=n.origin,
                            stride=(1,)))
            bias = Ref(new[-1].name)
        args = (n.args[0], Ref(folded_w.name), bias) + tuple(n.args[3:])
        out += new + [replace(n, name=last.name, args=args)]
        dropped.update(m.name for m in spine)
        log.append(f"fold_conv_affine: {last.name} = {n.op if n.op != 'aten' else 'convolution'}"
                   f"({n.args[0]}, {folded_w.name}, {bias}) with {n.name} -> {describe_stages(stages, nodes)} folded into "
                   f"{w}{' and ' + b if b else ''} (once per version of each tensor read)")
    if not log:
        return graph
    return dead_code(replace(graph, nodes=tuple(out)).with_log(*log))


def describe_stages(stages, nodes: dict) -> str:
    """`batch_norm(self.bn, eval) -> * 2.0 -> + self.shift`: what a fold holds, for logs and the header."""
    name = lambda r: f"self.{nodes[r].target}" if isinstance(r, Ref) else format_arg(r)  # noqa: E731
    parts = []
    for s in stages:
        if s[0] == "bn":
            module = nodes[s[1]].target.rpartition(".")[0]
            parts.append(f"batch_norm({'self.' + module if module else 'self'}, eval)")
        else:
            parts.append(f"{dict(mul='*', div='/', add='+', sub='-')[s[0]]} {name(s[1])}")
    return " -> ".join(parts)


def fold_header(graph: Graph) -> list[str]:
    """The emitted file's header lines that say what was folded, or none."""
    nodes = graph.by_name()
    folds = [n for n in graph.nodes if n.op == FOLD]
    if not folds:
        return []
    lines = ["Folded into convolution weights and biases (made at the first call in float64, rounded once, "
             "made again when a tensor they come from changes; the state dict is the original's):"]
    for n in folds:
        w, b, *stages = n.args
        into = f"self.{nodes[w].target}" + (f" and self.{nodes[b].target}" if b is not None else
                                           " and a bias" if has_shift(None, stages) else "")
        lines.append(f"  {n.name.removesuffix('_fold')}: {describe_stages(stages, nodes)} into {into}")
    if any(s[0] == "bn" for n in folds for s in n.args[2:]):
        lines.append("  A batch norm folds in eval mode only: in training mode forward runs the original.")
    return lines


def fold_source(name: str, nodes: dict) -> str | None:
    """The convolution weight behind a folded weight or bias `name` (what forward's guard checks), else None."""
    n = nodes.get(name)
    if n is None or n.op != "getitem" or not isinstance(n.args[0], Ref) or nodes[n.args[0]].op != FOLD:
        return None
    return nodes[n.args[0]].args[0]


def fold_spec(n: Node) -> tuple[tuple, list[str]]:
    """(spec, tensors) of fold node `n` for `_tw_fold_make`: in the spec's stages, an int indexes `tensors`
    (the weight, the bias, then the folded parameters) and a float is a number."""
    tensors: list[str] = []

    def index(r):
        if not isinstance(r, Ref):
            return r
        if r not in tensors:
            tensors.append(r)
        return tensors.index(r)

    w, b, *stages = n.args
    index(w)
    if b is not None:
        index(b)
    spec_stages = tuple(tuple(index(a) for a in s) for s in stages)
    return (n.attr("transposed"), n.attr("groups"), b is not None, spec_stages), tensors


def fold_call(n: Node, nodes: dict, users: dict, expr) -> str:
    """`v9_w, v9_b = _tw_fold(self, 'v9', spec, p0, ...)`: the fold's line in forward (`expr`: a value's name there)."""
    spec, tensors = fold_spec(n)
    items = {nodes[u].args[1]: u for u in users[n.name]}
    site = n.name.removesuffix("_fold")
    args = ", ".join(expr(Ref(t)) for t in tensors)
    return f"{items.get(0, '_')}, {items.get(1, '_')} = _tw_fold(self, {site!r}, {spec!r}, {args})"
