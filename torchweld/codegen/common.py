"""What every kernel kind's codegen shares: storage types, the C++ preludes (cuh/), operands and
their index expressions, parameter lists, comment headers, launchers, and the pointwise members of
a kernel as lines of CUDA at one element.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from pathlib import Path

from torchweld.codegen.ops import cuda_expr, lit
from torchweld.ir import Graph, Kernel, Node, Ref, ancestors_in, format_node
# NOTE: kind modules take these from here too
from torchweld.tiling import ITEMSIZE, THREADS, contiguous_strides, is_contiguous, own_strides  # noqa: F401

STORAGE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "float64": "double", "bool": "bool",
           "int64": "long long"}
CUH = Path(__file__).parent / "cuh"


def compute_type(dtype: str) -> str:
    return "double" if dtype == "float64" else "bool" if dtype == "bool" else "float"


# --- preludes -------------------------------------------------------------------------------------

def cuh(name: str) -> str:
    """The fixed C++ text of cuh/<name>, pasted into sources as it is."""
    return (CUH / name).read_text()


def prelude(lowp: bool) -> str:
    """What every file opens with: includes and load/store helpers (`lowp`: for fp16/bf16 data too)."""
    return cuh("prelude.cuh") + "\n" + (cuh("lowp.cuh") if lowp else "") + cuh("error_string.cuh")


# NOTE: tests/dw_host.py builds its host prelude from these, filling the mark itself.
LOWP_PRELUDE = cuh("lowp.cuh")
PRELUDE = cuh("prelude.cuh") + "\n%(LOWP)s\n" + cuh("error_string.cuh")


# --- operands and index expressions ---------------------------------------------------------------

@dataclass(frozen=True)
class Operand:
    """A tensor the kernel reads, with its broadcast strides against the iteration shape."""

    name: str
    dtype: str
    dims: tuple[tuple[int, int, int], ...]  # coalesced (size, stride in the iteration space, own stride)
    full: bool  # same shape as the iteration space: index == i


def coalesce(shape: tuple, operand_layouts: list[tuple[tuple, tuple]]) -> list[list[tuple[int, int, int]]]:
    """Per operand (shape, stride), (size, out_stride, own_stride) of its iteration dims, merged."""
    nd = len(shape)
    out_stride = contiguous_strides(shape)
    result = []
    for s, st in operand_layouts:
        pad = nd - len(s)
        own = (0,) * pad + own_strides(tuple(s), st)
        groups: list[list[int]] = []
        for d in (d for d in range(nd) if shape[d] != 1):
            if groups and own[groups[-1][-1]] == own[d] * shape[d]:
                groups[-1].append(d)
            else:
                groups.append([d])
        result.append([(prod(shape[d] for d in g), out_stride[g[-1]], own[g[-1]]) for g in groups])
    return result


def reach(node: Node, stride: tuple | None = None) -> int:
    """One past the largest element offset `node` is read at (with `stride`, else its captured strides)."""
    own = own_strides(tuple(node.shape), tuple(node.stride if stride is None else stride))
    return 1 + sum((size - 1) * st for size, st in zip(node.shape, own))


def index_expr(dims, i: str, itype: str) -> str:
    """Own index of an operand for iteration index `i` (dims outermost first)."""
    terms = []
    for k, (size, out_stride, own) in enumerate(dims):
        if own == 0:
            continue
        t = i if out_stride == 1 else f"({i} / {out_stride}{itype})"
        if k > 0:
            t = f"({t} % {size}{itype})"
        terms.append(t if own == 1 else f"{t} * {own}{itype}")
    return " + ".join(terms) or f"0{itype}"


def vec_class(op: Operand, vec: int) -> str:
    """How an operand is read by a thread that handles `vec` consecutive elements."""
    if op.full:
        return "full"
    live = [d for d in op.dims if d[2] != 0]
    if all(out_stride % vec == 0 for _, out_stride, _ in live):
        return "uniform"  # the same element for the whole vector: one scalar load
    if live and live[-1][1] == 1 and live[-1][2] == 1 and live[-1][0] % vec == 0 and all(
            d[1] % vec == 0 and d[2] % vec == 0 for d in live[:-1]):
        return "contig"  # consecutive elements of the operand: one vector load
    return "gather"


def operands(kernel: Kernel, graph: Graph) -> list[Operand]:
    nodes = graph.by_name()
    layouts = [(nodes[a].shape, nodes[a].stride) for a in kernel.inputs]
    dims = coalesce(kernel.shape, layouts)
    return [Operand(a, nodes[a].dtype, tuple(d),
                    tuple(nodes[a].shape) == tuple(kernel.shape) and is_contiguous(nodes[a]))
            for a, d in zip(kernel.inputs, dims)]


# --- parameters, headers, launchers ---------------------------------------------------------------

def in_ptr(name: str) -> str:
    """The kernel parameter that points at input `name`."""
    return f"in_{name}"


def const_arg(a, ctype: str) -> str:
    """An op's argument as C: a value by its name, a constant as a literal of the compute type."""
    if isinstance(a, Ref):
        return str(a)
    if a is None:
        return lit(float("inf"), ctype)
    return lit(a, "bool" if isinstance(a, bool) else ("double" if ctype == "double" else "float"))


def compute(node: Node) -> str:
    """`const <type> <name> = <expression>;` for a pointwise member."""
    ctype = compute_type(node.dtype)
    return f"const {ctype} {node.name} = {cuda_expr(node, [const_arg(a, ctype) for a in node.args], ctype)};"


def params(k: Kernel, nodes, mutable: tuple = ()) -> tuple[str, str, str]:
    """Kernel parameters, launcher parameters, and the launcher's casts (`mutable`: inputs written in place)."""
    ins = [f"{'' if a in mutable else 'const '}{STORAGE[nodes[a].dtype]}* __restrict__ {in_ptr(a)}" for a in k.inputs]
    outs = [f"{STORAGE[nodes[o].dtype]}* __restrict__ out_{o}" for o in k.outputs]
    ptrs = [f"const void* {in_ptr(a)}" for a in k.inputs] + [f"void* out_{o}" for o in k.outputs]
    casts = [f"({'' if a in mutable else 'const '}{STORAGE[nodes[a].dtype]}*){in_ptr(a)}" for a in k.inputs] + [
        f"({STORAGE[nodes[o].dtype]}*)out_{o}" for o in k.outputs]
    return ", ".join(ins + outs), ", ".join(ptrs), ", ".join(casts)


def header(k: Kernel, nodes, summary: str) -> str:
    """The comment a kernel's source opens with: what it is, then each member op and where it came from."""
    lines = [f"// {k.name}: {summary}"]
    for m in k.nodes:
        node = nodes[m]
        lines.append("//   " + format_node(node).split("  #")[0] + (f"    <- {node.origin}" if node.origin else ""))
    return "\n".join(lines) + "\n"


def iteration(k: Kernel) -> str:
    """A kernel's iteration shape as its comment says it, its runtime outer dims named."""
    if not k.batch:
        return f"{tuple(k.shape)}"
    if k.lead > 1:
        return "(any batch, any length)" + (f" x {tuple(k.shape[2:])}" if k.shape[2:] else "")
    return f"(any batch) x {tuple(k.shape[1:])}"


def anchored_header(k: Kernel, nodes) -> str:
    """The header of a kernel built around an anchor (a reduction, pool or convolution)."""
    return header(k, nodes, f"{nodes[k.anchor].op} of {iteration(k)} with {len(k.nodes) - 1} fused pointwise ops")


def batch_params(k: Kernel) -> tuple[str, str, str]:
    """What a runtime batch adds to (kernel parameters, launcher parameters, launcher casts): the batch
    size `nb`, after the pointers (ctypes passes it as one more pointer-sized value)."""
    return (", const unsigned nb", ", unsigned long long nb", ", (unsigned)nb") if k.batch else ("", "", "")


def outer(k: Kernel, size: int, it: str) -> str:
    """A size that scales with the batch as C: `size` itself, or `nb` times its share of one sample where
    the batch is a runtime size (NOTE: only sizes of dims outside every index's modulo scale: plan/batch.py)."""
    return f"nb * {size // k.batch}{it}" if k.batch else f"{size}{it}"


def blocks_of(k: Kernel, count: int, per: int, times: int = 1) -> str:
    """`ceil(count / per) * times` blocks as C, `count` scaling with the batch where it is a runtime size."""
    if not k.batch:
        return f"{-(-count // per) * times}u"
    # NOTE: in the launcher, where nb is 64-bit: the product may pass 32 bits where the block count does not
    scaled = (f"(unsigned)((nb * {count // k.batch}ull + {per - 1}ull) / {per}ull)" if per > 1
              else f"(unsigned)(nb * {count // k.batch}ull)")
    return f"{scaled} * {times}u" if times > 1 else scaled


def kernel_with_launcher(k: Kernel, nodes, body: list[str], nt: int, blocks: int | str, mutable: tuple = ()) -> str:
    """One kernel of `nt` threads a block around `body`, and its `extern "C"` launcher of `blocks` blocks
    (a C expression where it scales with a runtime batch)."""
    kparams, lparams, casts = params(k, nodes, mutable)
    kb, lb, cb = batch_params(k)
    grid = blocks if isinstance(blocks, str) else f"{blocks}u"
    return "\n".join(
        [f"__global__ void __launch_bounds__({nt}) {k.name}({kparams}{kb}) {{"] + body + ["}", "",
         f'extern "C" int tw_launch_{k.name}({lparams}{lb}, int vec, void* stream) {{',
         "  (void)vec;",
         f"  {k.name}<<<{grid}, {nt}, 0, (cudaStream_t)stream>>>({casts}{cb});",
         "  return (int)cudaGetLastError();", "}", ""])


@dataclass(frozen=True)
class Launch:
    """What a kernel's Python wrapper must provide: a workspace (floats) and the vector build's alignment."""

    workspace: int
    vec: int  # 1: no vector build
    aligned: tuple[tuple[str, int], ...]  # (input or output name, bytes) that the vector build needs


PLAIN = Launch(0, 1, ())  # no workspace, no vector build


def variant_name(k: Kernel) -> str:
    """The channels-last build of `k` (plan/conv_layout.py says where it runs)."""
    return f"{k.name}_cl"


# --- pointwise members at one element -------------------------------------------------------------

class PointwiseLines:
    """CUDA lines computing some members at one element, loading the tensors they read.

    Names in `vec` are full-size contiguous inputs: inside a vector loop they come from
    `r_<name>.v[e]`, loaded 16 bytes at a time before it.
    """

    def __init__(self, kernel: Kernel, nodes: dict[str, Node], itype: str, vec: frozenset = frozenset()):
        self.kernel, self.nodes, self.itype, self.vec = kernel, nodes, itype, vec
        self.inputs = set(kernel.inputs)

    def load(self, name: str, shape: tuple, idx: str, vec: bool = False) -> str:
        if vec and name in self.vec:
            return f"const auto {name} = tw_ld(r_{name}.v[e]);"
        n = self.nodes[name]
        dims = coalesce(tuple(shape), [(n.shape, n.stride)])[0]
        return f"const auto {name} = tw_ld({in_ptr(name)}[{index_expr(dims, idx, self.itype)}]);"

    def lines(self, members: list[str], shape: tuple, idx: str, extra: tuple = (), vec: bool = False,
              have: frozenset = frozenset()) -> list[str]:
        """`have`: tensors already in variables of their name (loads skipped)."""
        out, loaded = [], set(have)
        for m in list(members) + list(extra):
            refs = [m] if m in extra else self.nodes[m].inputs()
            for r in refs:
                if r in self.inputs and r not in loaded:
                    loaded.add(r)
                    out.append(self.load(r, shape, idx, vec))
        return out + [compute(self.nodes[m]) for m in members]


def split_at_anchor(k: Kernel, nodes) -> tuple[list[str], list[str]]:
    """The members the anchor reads (its prologue) and the rest after it (its epilogue), in order."""
    before = ancestors_in(k.anchor, set(k.nodes), nodes)
    return [m for m in k.nodes if m in before], [m for m in k.nodes if m not in before and m != k.anchor]


def dedupe_loads(body: list[str]) -> list[str]:
    """Drop a second load of a tensor already loaded at the same element."""
    seen, out = set(), []
    for line in body:
        if line.startswith("const auto ") and line in seen:
            continue
        seen.add(line)
        out.append(line)
    return out
