"""Our GEMM (`Options.gemm`): which GEMMs become a kernel of kind "gemm", with the pointwise kernel
after them folded in as the epilogue, and the strides each operand is read through.

    out[b, m, n] = epilogue(alpha * sum_k A[b, m, k] B[b, k, n] + beta * C[b, m, n])

The views between a GEMM and its operands (t(), transpose, expand of a batch, view) are read in place
through their captured strides: no copies. A pointwise kernel reading the GEMM's result (through
views that only reshape it) folds in where it reads it alone, writes one value of its full shape,
and every other operand maps onto (batch, row, column) with one stride each (a bias over columns, a
per-row scale, a residual of full shape). plan/ records what to build; codegen/gemm_kernel.py makes
the GemmSpec, and `check` (from codegen, handed in by the pipeline) says whether the generator
builds it (else the site stays a library call) and how (its tile and precision description).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Callable

from torchweld.ir import VIEWS, Kernel, Node, Ref
from torchweld.tiling import contiguous_strides

GEMMS = {"aten.mm.default": "mm", "aten.bmm.default": "bmm", "aten.addmm.default": "addmm",
         "aten.baddbmm.default": "baddbmm"}
DTYPES = ("float32", "float16", "bfloat16")
# Views after the GEMM that only reshape its contiguous result.
RESHAPES = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"}


@dataclass(frozen=True)
class Operand:
    """A tensor the GEMM kernel reads: its name and element strides over (batch, row, column)
    (for A: (batch, m, k); B: (batch, k, n); C and epilogue inputs: (batch, m, n); 0 broadcasts)."""

    name: str
    strides: tuple[int, int, int]
    dtype: str = "float32"


@dataclass(frozen=True)
class OursGemm:
    """One GEMM run by our kernel: what codegen builds (codegen/gemm_kernel.py) and emit launches."""

    kernel: Kernel  # kind "gemm", anchored on the GEMM; its nodes: the GEMM, views after it, the folded ops
    op: str  # mm, bmm, addmm, baddbmm
    batch: int
    m: int
    n: int
    k: int
    dtype: str
    a: Operand
    b: Operand
    c: Operand | None  # addmm/baddbmm's input
    alpha: float
    beta: float
    epilogue: tuple[Operand, ...]  # the folded kernel's other operands
    folded: str  # the pointwise kernel folded in as the epilogue ("" where none)
    precision: str  # "" (3xtf32 for fp32, native for fp16/bf16) or "1xtf32"
    no_fold: str = ""  # why the kernel after it (if any) was not folded
    how: str = ""  # codegen's description: tiles and precision

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The shape the kernel writes its one output in (contiguous): the folded kernel's, or the GEMM's."""
        return tuple(self.kernel.shape)


# Checks a site with codegen: (why not, "") or (None, its tile and precision description).
Check = Callable[[OursGemm], tuple[str | None, str]]


def gemm_ours(p, tf32: bool = False, check: Check | None = None) -> dict[str, OursGemm | str]:
    """{GEMM node: the site ours runs, or why it stays a library call}, for every GEMM in `p`."""
    nodes, users = p.graph.by_name(), p.graph.users()
    out, claimed = {}, set()
    for n in p.graph.nodes:
        if n.op != "aten" or n.target not in GEMMS:
            continue
        site = _site(n, p, nodes, users, tf32, claimed)
        if isinstance(site, OursGemm) and check is not None:
            why, how = check(site)
            site = why if why else replace(site, how=how)
        if isinstance(site, OursGemm) and site.folded:
            claimed.add(site.folded)  # NOTE: a kernel reading two GEMMs' results folds into the first alone
        out[n.name] = site
    return out


def apply(p, sites: dict[str, OursGemm | str]):
    """`p` with each site's kernel in place of the kernel it folds (or after its GEMM), and the GEMM and
    the views it folds no longer steps of their own."""
    ours = [s for s in sites.values() if isinstance(s, OursGemm)]
    if not ours:
        return p
    folded = {s.folded: s.kernel for s in ours if s.folded}
    gone = {m for s in ours for m in s.kernel.nodes if m in p.graph.by_name()}
    kernels = [folded.get(k.name, k) for k in p.kernels]
    steps = []
    for step in p.steps:
        if step in folded:
            steps.append(folded[step].name)
            continue
        alone = next((s for s in ours if not s.folded and s.kernel.anchor == step), None)
        if alone is not None:
            kernels.append(alone.kernel)
            steps.append(alone.kernel.name)
        elif step not in gone:
            steps.append(step)
    order = {name: i for i, name in enumerate(steps)}
    kernels.sort(key=lambda k: order.get(k.name, len(order)))
    return replace(p, kernels=tuple(kernels), steps=tuple(steps))


MOVES = ("aten.t.default", "aten.transpose.int", "aten.permute.default", "aten.expand.default")


def params_read(p, params: tuple[str, ...]) -> tuple[str, ...]:
    """`params` (the guard's) and each parameter our GEMM kernels read through views and transposes:
    forward checks their dtype and device too (the kernel is built for them)."""
    nodes = p.graph.by_name()
    found = list(params)
    for k in p.kernels:
        for a in k.inputs if k.kind == "gemm" else ():
            n = nodes[a]
            while n.op == "aten" and (n.target in VIEWS or n.target in MOVES) and n.args and isinstance(n.args[0], Ref):
                n = nodes[n.args[0]]
            if n.op == "param" and n.name not in found:
                found.append(n.name)
    return tuple(found)


def describe_site(gemm: str, site: OursGemm | str) -> str:
    """One line for explain and the file's header."""
    if isinstance(site, str):
        return f"{gemm}: library: {site}"
    fold = f", epilogue {site.folded} folded in" if site.folded else (f" (no epilogue: {site.no_fold})"
                                                                      if site.no_fold else "")
    return (f"{gemm}: ours as {site.kernel.name}: {site.op} {site.batch} x ({site.m} x {site.k}) @ "
            f"({site.k} x {site.n}) {site.dtype}{fold}" + (f"; {site.how}" if site.how else ""))


def broadcast_strides(node: Node, shape: tuple) -> tuple[int, ...]:
    """`node`'s element strides over `shape`, right-aligned, 0 where it broadcasts."""
    lead, own = len(shape) - len(node.shape), tuple(node.stride) or contiguous_strides(node.shape)
    return tuple(0 if i < lead or node.shape[i - lead] == 1 else own[i - lead] for i in range(len(shape)))


def _collapse(shape: tuple, strides: tuple) -> int | None:
    """One stride walking these dims as one flattened dim (row-major), or None where none does."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 0
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return dims[-1][1]


def _bmn(node: Node, shape: tuple, batched: bool) -> tuple[int, int, int] | None:
    """`node` read over `shape` as strides over (batch, m, n): `batched`, the dims before the last two
    are the batch; else every dim before the last is a row."""
    st = broadcast_strides(node, shape)
    if len(shape) < 2:
        return 0, 0, st[-1]
    if not batched:
        sm = _collapse(shape[:-1], st[:-1])
        return None if sm is None else (0, sm, st[-1])
    sb = _collapse(shape[:-2], st[:-2])
    return None if sb is None else (sb, st[-2], st[-1])


def _site(n: Node, p, nodes: dict, users: dict, tf32: bool, claimed: set) -> OursGemm | str:
    """The site for GEMM `n`, or why ours does not run it."""
    op = GEMMS[n.target]
    if n.dtype not in DTYPES:
        return f"{n.dtype} (ours takes fp32, fp16 and bf16)"
    mats = n.args[1:3] if op in ("addmm", "baddbmm") else n.args[:2]
    if not all(isinstance(x, Ref) and x in nodes for x in mats):
        return "an operand is not a tensor of the graph"
    a, b = (nodes[x] for x in mats)
    if a.dtype != n.dtype or b.dtype != n.dtype:
        return "operands of another dtype"
    batch = a.shape[0] if len(a.shape) == 3 else 1
    m, k, nn = a.shape[-2], a.shape[-1], b.shape[-1]
    # NOTE: a node a rewrite made has no recorded strides: it is a fresh, contiguous tensor
    strides = lambda x: tuple(x.stride) or contiguous_strides(x.shape)  # noqa: E731
    three = strides if len(a.shape) == 3 else (lambda x: (0, *strides(x)))
    out_shape = (batch, m, nn) if len(n.shape) == 3 else (m, nn)
    c = None
    if op in ("addmm", "baddbmm"):
        x = n.args[0]
        if not isinstance(x, Ref) or nodes[x].dtype not in DTYPES:
            return "addmm's input is not a tensor of a supported dtype"
        cs = _bmn(nodes[x], out_shape, batch > 1)
        if cs is None:
            return "addmm's input broadcasts in a way one stride cannot walk"
        c = Operand(x, cs, nodes[x].dtype)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0)) if c else 0.0
    base = OursGemm(Kernel("", (n.name,), (), (n.name,), tuple(n.shape), "gemm", n.name), op, batch, m, nn, k, n.dtype,
                    Operand(a.name, three(a), a.dtype), Operand(b.name, three(b), b.dtype), c, alpha, beta, (), "",
                    "1xtf32" if tf32 and n.dtype == "float32" else "")
    fold = _fold(n, base, p, nodes, users, claimed)
    if isinstance(fold, str):
        ins = tuple(dict.fromkeys((a.name, b.name) + ((c.name,) if c else ())))  # x @ x reads x once
        return replace(base, kernel=Kernel(f"g{n.name}", (n.name,), ins, (n.name,), tuple(n.shape), "gemm", n.name),
                       no_fold=fold)
    return fold


def _fold(n: Node, base: OursGemm, p, nodes: dict, users: dict, claimed: set) -> OursGemm | str:
    """`base` with the pointwise kernel reading the GEMM's result folded in, or why none is."""
    chain = [n.name]
    while len(users[chain[-1]]) == 1 and users[chain[-1]][0] in nodes and nodes[users[chain[-1]][0]].op == "aten" \
            and nodes[users[chain[-1]][0]].target in RESHAPES:
        chain.append(users[chain[-1]][0])
    readers = users[chain[-1]]
    k = next((k for k in p.kernels if chain[-1] in k.inputs), None)
    if k is None:
        return "no fused kernel reads its result"
    if k.kind != "pointwise":
        return f"{k.name} is a {k.kind} kernel"
    if k.name in claimed:
        return f"{k.name} is folded into another GEMM"
    if any(len(users[x]) != 1 for x in chain[:-1]) or any(r not in k.nodes for r in readers):
        return "its result is also read elsewhere"
    if len(k.outputs) != 1 or tuple(nodes[k.outputs[0]].shape) != tuple(k.shape):
        return f"{k.name} writes more than one value of its shape"
    if nodes[k.outputs[0]].dtype != n.dtype:
        return f"{k.name} writes another dtype"
    shape = tuple(k.shape)
    batched = base.batch > 1
    if tuple(nodes[chain[-1]].shape) != shape or prod(shape) != base.batch * base.m * base.n or \
            shape[-1] != base.n or (batched and (len(shape) < 3 or shape[-2] != base.m)):
        return f"{k.name} runs over another shape than the GEMM's rows and columns"
    ins = []
    for x in k.inputs:
        if x == chain[-1]:
            continue
        if nodes[x].dtype not in DTYPES:
            return f"operand {x} is {nodes[x].dtype}"
        st = _bmn(nodes[x], shape, batched)
        if st is None:
            return f"operand {x} broadcasts over the batch in a way one stride cannot walk"
        ins.append(Operand(x, st, nodes[x].dtype))
    gemm_ins = (base.a.name, base.b.name) + ((base.c.name,) if base.c else ())
    kernel = Kernel(f"g{k.name}", (*chain, *k.nodes), tuple(dict.fromkeys(gemm_ins + tuple(o.name for o in ins))),
                    k.outputs, shape, "gemm", n.name)
    return replace(base, kernel=kernel, epilogue=tuple(ins), folded=k.name)
