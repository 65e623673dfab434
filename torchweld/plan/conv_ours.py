"""Our convolution (`Options.conv_ours`): which convolutions become a kernel of kind "conv" (implicit
GEMM, codegen/conv*.py), with the pointwise kernel after them folded in as the epilogue.

Every convolution the library would run (`aten.convolution`, forward or transposed, 1-d to 3-d, any
stride, padding, output padding, dilation and groups; fp32, fp16, bf16) is a site. The pointwise
kernel reading its result folds in where it reads it alone, writes one value of the convolution's
shape and dtype, and every other operand is either per channel (a bias of shape (C, 1, 1), a folded
batch norm's scale and shift) or read at each output element through its strides (a residual). The
convolution's own bias is a per-channel operand of the epilogue. plan/ records what to build;
codegen/conv_kernel.py makes the ConvSpec, and `check` (handed in by the pipeline) says whether the
generator builds it (else the site stays a library call) and how.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Callable

from torchweld.ir import CONVOLUTION, Kernel, Node, Ref
from torchweld.plan.gemm_ours import broadcast_strides

DTYPES = ("float32", "float16", "bfloat16")
# Reductions a reduce kernel after a convolution may fold in: over every output pixel, or over the channels.
PIXELS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}
CHANNELS = {"softmax": "softmax", "log_softmax": "log_softmax"}
WIDEST = 128  # the widest tile a channel softmax fits in (codegen/conv_spec.TILES90)


@dataclass(frozen=True)
class ConvOperand:
    """A tensor the epilogue reads: kind "chan" (`strides` = its one stride over channels) or "full"
    (strides over the output's (n, c, spatial...); 0 broadcasts)."""

    name: str
    kind: str
    strides: tuple[int, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class OursConv:
    """One convolution run by our kernel: what codegen builds (codegen/conv_kernel.py) and emit launches."""

    kernel: Kernel  # kind "conv", anchored on the convolution; its nodes: the convolution, then the folded ops
    x: str
    w: str
    bias: str | None  # the convolution's own bias
    n: int
    cin: int
    cout: int
    size: tuple[int, ...]
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    output_padding: tuple[int, ...]
    groups: int
    transposed: bool
    dtype: str
    epilogue: tuple[ConvOperand, ...]  # the folded kernel's other operands
    folded: str  # the pointwise kernel folded in ("" where none)
    precision: str  # "" (3xtf32 for fp32, native for fp16/bf16) or "1xtf32"
    no_fold: str = ""  # why the kernel after it (if any) was not folded
    how: str = ""  # codegen's description: tiles, precision, gather
    pool: str = ""  # a folded pool kernel's "max" or "avg" (its anchor: `kernel.nodes` up to it run before it)
    pool_window: tuple[int, ...] = ()  # per spatial dim, 1 where it pools nothing
    pool_divisor: int = 0
    stored: tuple[int, ...] = ()  # the pooled or reduced output's shape
    reduce: str = ""  # a folded reduction: "sum", "mean", "max", "min" (every pixel), "softmax", "log_softmax", "chan_*"
    also: str = ""  # a pixel reduce kernel folded in after `folded`, whose input is also read elsewhere: both are written

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The shape the kernel writes: the convolution's (or its folded kernel's), or the pooled or reduced one
        (`also`: the reduced one, its second output)."""
        return tuple(self.stored) if self.pool or self.reduce else tuple(self.kernel.shape)


Check = Callable[[OursConv], tuple[str | None, str]]


def conv_ours(p, tf32: bool = False, check: Check | None = None) -> dict[str, OursConv | str]:
    """{convolution node: the site ours runs, or why it stays a library call}, for every convolution step."""
    nodes, users = p.graph.by_name(), p.graph.users()
    out, claimed = {}, set()
    for step in p.steps:
        n = nodes.get(step)
        if n is None or p.kernel(step) is not None or n.op != "aten" or n.target != CONVOLUTION:
            continue
        site = _site(n, p, nodes, users, tf32, claimed)
        more = _fold_also(site, p, nodes, users, claimed) if isinstance(site, OursConv) else None
        for cand in ([more] if more else []) + [site]:  # NOTE: codegen may refuse the reduction, not the site
            if isinstance(cand, OursConv) and check is not None:
                why, how = check(cand)
                cand = why if why else replace(cand, how=how)
            site = cand
            if isinstance(site, OursConv):
                break
        if isinstance(site, OursConv):
            claimed.update({site.folded, site.also} - {""})
        out[n.name] = site
    return out


def apply(p, sites: dict[str, OursConv | str]):
    """`p` with each site's kernel in place of the kernel it folds (or in its convolution's step), and
    the convolution no longer a step of its own."""
    ours = [s for s in sites.values() if isinstance(s, OursConv)]
    if not ours:
        return p
    # NOTE: a site with `also` runs at its reduce kernel's step (the reduction's operands are ready there; its
    # full output's other readers come after it: _fold_also), the pointwise kernel's step is dropped
    folded = {(s.also or s.folded): s.kernel for s in ours if s.folded or s.also}
    dropped = {s.folded for s in ours if s.also and s.folded}
    alone = {s.kernel.anchor: s.kernel for s in ours if not (s.folded or s.also)}
    gone = {s.kernel.anchor for s in ours if s.folded or s.also} | dropped
    kernels, steps = [folded.get(k.name, k) for k in p.kernels if k.name not in dropped], []
    for step in p.steps:
        if step in folded:
            steps.append(folded[step].name)
        elif step in alone:
            kernels.append(alone[step])
            steps.append(alone[step].name)
        elif step not in gone:
            steps.append(step)
    order = {name: i for i, name in enumerate(steps)}
    kernels.sort(key=lambda k: order.get(k.name, len(order)))
    return replace(p, kernels=tuple(kernels), steps=tuple(steps))


def describe_site(conv: str, site: OursConv | str) -> str:
    """One line for explain and the file's header."""
    if isinstance(site, str):
        return f"{conv}: library: {site}"
    folds = " and ".join(x for x in (site.folded, site.also) if x)
    fold = f", epilogue {folds} folded in" if folds else (f" (no epilogue: {site.no_fold})" if site.no_fold else "")
    kind = "transposed conv" if site.transposed else "conv"
    return (f"{conv}: ours as {site.kernel.name}: {kind}{len(site.size)}d {site.n}x{site.cin}x"
            f"{'x'.join(map(str, site.size))} -> {site.cout} channels {site.dtype}{fold}" + (f"; {site.how}" if site.how else ""))


def _operand(node: Node, shape: tuple) -> ConvOperand:
    """`node` read over the output's `shape`: per channel where only the channel dim has a stride."""
    st = broadcast_strides(node, shape)
    if all(s == 0 for i, s in enumerate(st) if i != 1):
        return ConvOperand(node.name, "chan", (st[1],), node.dtype)
    return ConvOperand(node.name, "full", st, node.dtype)


def _site(n: Node, p, nodes: dict, users: dict, tf32: bool, claimed: set) -> OursConv | str:
    """The site for convolution `n`, or why ours does not run it."""
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = n.args
    if n.dtype not in DTYPES:
        return f"{n.dtype} (ours takes fp32, fp16 and bf16)"
    if not all(isinstance(a, Ref) and a in nodes for a in (x, w)) or (b is not None and not isinstance(b, Ref)):
        return "an operand is not a tensor of the graph"
    xn, wn = nodes[x], nodes[w]
    if xn.dtype != n.dtype or wn.dtype != n.dtype or (b is not None and nodes[b].dtype != n.dtype):
        return "operands of another dtype"
    if len(xn.shape) != len(n.shape) or len(xn.shape) not in (3, 4, 5):
        return "an unbatched or 4-d+ spatial convolution"
    dims = len(xn.shape) - 2
    tup = lambda v: tuple(int(a) for a in v) * (dims if len(v) == 1 else 1)  # noqa: E731
    bias = (nodes[b].name,) if b is not None else ()
    base = OursConv(Kernel(f"c{n.name}", (n.name,), tuple(dict.fromkeys((xn.name, wn.name, *bias))), (n.name,),
                           tuple(n.shape), "conv", n.name),
                    xn.name, wn.name, b if b is None else nodes[b].name, int(xn.shape[0]), int(xn.shape[1]), int(n.shape[1]),
                    tuple(int(s) for s in xn.shape[2:]), tuple(int(s) for s in wn.shape[2:]), tup(stride), tup(padding),
                    tup(dilation), tup(output_padding) if transposed else (0,) * dims, int(groups), bool(transposed),
                    n.dtype, (), "", "1xtf32" if tf32 and n.dtype == "float32" else "")
    fold = _fold(n, base, p, nodes, users, claimed)
    return replace(base, no_fold=fold) if isinstance(fold, str) else fold


def _fold(n: Node, base: OursConv, p, nodes: dict, users: dict, claimed: set) -> OursConv | str:
    """`base` with the pointwise kernel reading the convolution's result folded in, or why none is."""
    k = next((k for k in p.kernels if n.name in k.inputs), None)
    if k is None:
        return "no fused kernel reads its result"
    if k.kind == "pool":
        return _fold_pool(n, base, k, nodes, users, claimed)
    if k.kind == "reduce":
        return _fold_reduce(n, base, k, nodes, users, claimed)
    if k.kind != "pointwise":
        return f"{k.name} is a {k.kind} kernel"
    if k.name in claimed:
        return f"{k.name} is folded into another convolution"
    if any(r not in k.nodes for r in users[n.name]):
        return "its result is also read elsewhere"
    if len(k.outputs) != 1 or tuple(nodes[k.outputs[0]].shape) != tuple(n.shape) or tuple(k.shape) != tuple(n.shape):
        return f"{k.name} writes more than one value, or not of the convolution's shape"
    if nodes[k.outputs[0]].dtype != n.dtype:
        return f"{k.name} writes another dtype"
    ins = []
    for a in k.inputs:
        if a == n.name:
            continue
        if nodes[a].dtype not in DTYPES:
            return f"operand {a} is {nodes[a].dtype}"
        if len(nodes[a].shape) > len(n.shape):
            return f"operand {a} has more dims than the output"
        ins.append(_operand(nodes[a], tuple(n.shape)))
    own = base.kernel.inputs
    kernel = Kernel(f"c{k.name}", (n.name, *k.nodes), tuple(dict.fromkeys(own + tuple(o.name for o in ins))),
                    k.outputs, tuple(n.shape), "conv", n.name)
    return replace(base, kernel=kernel, epilogue=tuple(ins), folded=k.name)


def _fold_pool(n: Node, base: OursConv, k, nodes: dict, users: dict, claimed: set) -> OursConv | str:
    """`base` with a pool kernel folded in (its prologue ops, a non-overlapping max or avg pool of
    windows of 2, 4 or 8 outputs, per-channel ops after it), or why it is not."""
    a = nodes[k.anchor]
    if a.op not in ("max_pool", "avg_pool"):
        return f"{k.name} is an {a.op} kernel"
    kern, stride, pad = tuple(a.attr("kernel")), tuple(a.attr("stride")), tuple(a.attr("padding"))
    dims = len(n.shape) - 2
    window = (1,) * (dims - len(kern)) + kern
    if stride != kern or any(pad) or set(a.attr("dilation", (1,)) or (1,)) != {1} or a.attr("ceil_mode") \
            or prod(window) not in (2, 4, 8) or len(kern) > dims:
        return f"{k.name} pools overlapping, padded or ceil-mode windows, or not 2, 4 or 8 outputs"
    if k.name in claimed or any(r not in k.nodes for r in users[n.name]) or len(k.outputs) != 1:
        return "its result is also read elsewhere"
    out = nodes[k.outputs[0]]
    if out.dtype != n.dtype or len(out.shape) != len(n.shape):
        return f"{k.name} writes another dtype or rank"
    at = list(k.nodes).index(a.name)
    before, after = set(k.nodes[:at]), set(k.nodes[at + 1:])
    ins = []
    for x in k.inputs:
        if x == n.name:
            continue
        readers = {u for u in users[x] if u in k.nodes}
        if nodes[x].dtype not in DTYPES or len(nodes[x].shape) > len(n.shape):
            return f"operand {x} is {nodes[x].dtype} or of more dims"
        op = _operand(nodes[x], tuple(n.shape)) if readers <= before else _operand(nodes[x], tuple(out.shape))
        if readers & after and (op.kind != "chan" or readers & before):
            return f"operand {x} is read after the pool at each output"
        ins.append(op)
    kernel = Kernel(f"c{k.name}", (n.name, *k.nodes), tuple(dict.fromkeys(base.kernel.inputs + tuple(o.name for o in ins))),
                    k.outputs, tuple(n.shape), "conv", n.name)
    return replace(base, kernel=kernel, epilogue=tuple(ins), folded=k.name, pool=a.op.split("_")[0], pool_window=window,
                   pool_divisor=int(a.attr("divisor", 0) or 0), stored=tuple(out.shape))


def _fold_reduce(n: Node, base: OursConv, k, nodes: dict, users: dict, claimed: set) -> OursConv | str:
    """`base` with a reduce kernel folded in (its pointwise prologue, a sum, mean, amax or amin over every
    output pixel or a softmax or log-softmax over the channels, per-channel ops after it), or why it is not."""
    a, rank = nodes[k.anchor], len(n.shape)
    dims = {d % rank for d in a.attr("dims", ())}
    over = dims == {1} and a.op in PIXELS  # NOTE: a sum, mean, amax or amin over the channels: one value a pixel
    red = "chan_" + PIXELS[a.op] if over else PIXELS.get(a.op) or CHANNELS.get(a.op)
    if red is None or any(m != a.name and not nodes[m].is_pointwise for m in k.nodes):
        return f"{k.name} is a {a.op} kernel (ours folds one sum, mean, amax, amin or softmax and pointwise ops)"
    if a.op in PIXELS and not over and dims != set(range(2, rank)):
        return f"{k.name} reduces dims {sorted(dims)}, not every pixel nor the channels"
    if (a.op in CHANNELS or over) and (dims != {1} or base.groups != 1 or base.cout > WIDEST):
        return f"{k.name}'s {a.op} is not over the {base.cout} channels of one group of at most {WIDEST}"
    if k.name in claimed or any(r not in k.nodes for r in users[n.name]) or len(k.outputs) != 1:
        return "its result is also read elsewhere"
    out = nodes[k.outputs[0]]
    if out.dtype != n.dtype or a.dtype != n.dtype:
        return f"{k.name} writes another dtype"
    at = list(k.nodes).index(a.name)
    before, after = set(k.nodes[:at]), set(k.nodes[at + 1:])
    if a.args[0] not in before | {n.name}:
        return f"{k.name}'s {a.op} does not reduce the convolution's values"
    if any(isinstance(x, Ref) and x in before | {n.name} for m in after for x in nodes[m].args):
        return f"{k.name} reads values before its {a.op} after it"
    ins = []
    for x in k.inputs:
        if x == n.name:
            continue
        readers = {u for u in users[x] if u in k.nodes}
        shape = tuple(n.shape) if readers <= before else tuple(out.shape)
        if nodes[x].dtype not in DTYPES or len(nodes[x].shape) > len(shape):
            return f"operand {x} is {nodes[x].dtype} or of more dims"
        op = _operand(nodes[x], shape)
        if readers & after and (op.kind != "chan" or readers & before):
            return f"operand {x} is read after the {a.op} at each output"
        ins.append(op)
    kernel = Kernel(f"c{k.name}", (n.name, *k.nodes), tuple(dict.fromkeys(base.kernel.inputs + tuple(o.name for o in ins))),
                    k.outputs, tuple(n.shape), "conv", n.name)
    return replace(base, kernel=kernel, epilogue=tuple(ins), folded=k.name, reduce=red, stored=tuple(out.shape))


def _fold_also(site: OursConv, p, nodes: dict, users: dict, claimed: set) -> OursConv | None:
    """`site` (its pointwise kernel folded in, if any) with the reduce kernel reading its result folded in
    too, where that result is also read elsewhere: a sum, mean, amax or amin over every pixel of it,
    per-channel ops after; the kernel then writes both. None where there is no such kernel."""
    if site.pool or site.reduce or len(site.kernel.outputs) != 1:
        return None
    v, rank = site.kernel.outputs[0], len(site.kernel.shape)
    r = next((k for k in p.kernels if k.kind == "reduce" and v in k.inputs and k.name not in claimed), None)
    if r is None or nodes[r.anchor].op not in PIXELS or r.nodes[0] != r.anchor or len(r.outputs) != 1:
        return None
    a, out = nodes[r.anchor], nodes[r.outputs[0]]
    if {d % rank for d in a.attr("dims", ())} != set(range(2, rank)) or a.args[0] != v or out.dtype != site.dtype \
            or any(m != a.name and (not nodes[m].is_pointwise or v in nodes[m].args) for m in r.nodes):
        return None
    step = {m: k.name for k in p.kernels for m in k.nodes}
    order = {s: i for i, s in enumerate(p.steps)}
    late = lambda u: order.get(step.get(u, u), len(order) if u == "<output>" else -1) > order.get(r.name, -1)  # noqa: E731
    if not all(late(u) for u in users[v] if u not in r.nodes):
        return None  # NOTE: the merged kernel runs at the reduce kernel's step: every other reader comes later
    ins, have = [], {e.name: e.kind for e in site.epilogue} | ({site.bias: "chan"} if site.bias else {})
    for x in r.inputs:
        if x == v or have.get(x) == "chan":
            continue
        op = _operand(nodes[x], tuple(out.shape)) if len(nodes[x].shape) <= len(out.shape) else None
        if op is None or op.kind != "chan" or nodes[x].dtype not in DTYPES or x in have:
            return None
        ins.append(op)
    k = site.kernel
    kernel = Kernel(k.name, k.nodes + r.nodes, tuple(dict.fromkeys(k.inputs + tuple(o.name for o in ins))),
                    (v, r.outputs[0]), k.shape, "conv", k.anchor)
    return replace(site, kernel=kernel, epilogue=site.epilogue + tuple(ins), reduce=PIXELS[a.op], stored=tuple(out.shape),
                   also=r.name, no_fold="")
