"""The project's small IR: a flat list of frozen nodes that prints as readable Python."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod

# Pointwise ops the fuser understands, by arity. Each has an emitter in codegen/ops.py.
UNARY = frozenset({
    "neg", "abs", "exp", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "reciprocal", "square",
    "sin", "cos", "tan", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "sign",
    "relu", "silu", "mish", "hardswish", "hardsigmoid", "gelu", "gelu_tanh", "logical_not",
})
BINARY = frozenset({
    "add", "sub", "mul", "div", "pow", "minimum", "maximum", "fmod",
    "gt", "lt", "ge", "le", "eq", "ne", "logical_and", "logical_or",
})
# Ops whose extra parameters are compile-time constants kept in `attrs`.
PARAMETRIC = frozenset({"leaky_relu", "elu", "softplus", "cast"})
TERNARY = frozenset({"where", "fma", "clamp"})
POINTWISE = UNARY | BINARY | PARAMETRIC | TERNARY
COMPARISONS = frozenset({"gt", "lt", "ge", "le", "eq", "ne", "logical_and", "logical_or", "logical_not"})
# The one aten convolution overload a trace holds (1d-3d, transposed or not, any groups).
CONVOLUTION = "aten.convolution.default"
# Library anchors: what stays a call into cuDNN/cuBLAS through ATen.
LIBRARY = frozenset({
    CONVOLUTION, "aten.mm.default", "aten.mv.default", "aten.bmm.default", "aten.addmm.default",
    "aten.baddbmm.default", "aten.addbmm.default", "aten.matmul.default",
    # recurrences (capture/recurrent.py): cuDNN's LSTM, GRU and RNN
    "aten.lstm.input", "aten.gru.input", "aten.rnn_tanh.input", "aten.rnn_relu.input",
})
# Row reductions, softmax and norms: each anchors one kernel of kind "reduce" (codegen/reduce.py)
# that may also hold a pointwise prologue (recomputed per read) and epilogue (on its result).
REDUCTION = frozenset({"sum", "mean", "amax", "amin", "logsumexp", "prod", "argmax", "argmin", "vector_norm",
                       "var", "std"})
# Reductions whose value a row epilogue may read (argmax/argmin give indices).
ROW_OPS = REDUCTION - {"argmax", "argmin"}
ROWWISE = frozenset({"softmax", "log_softmax", "cumsum", "cumprod"})
# A reduction's second result (max's values, var_mean's mean): made by its anchor's kernel.
AUX = "reduce_aux"
NORM = frozenset({"layer_norm", "group_norm", "instance_norm", "batch_norm"})
# Pooling over the last 1-3 dims: each anchors one kernel of kind "pool" (codegen/pool.py), one
# thread per output, with a pointwise prologue (recomputed per read) and epilogue (on the pooled value).
POOL = frozenset({"max_pool", "avg_pool", "adaptive_max_pool", "adaptive_avg_pool"})
# Depthwise convolution (groups == input channels): anchors one kernel of kind "depthwise"
# (codegen/depthwise.py) with a pointwise epilogue on its output; other convolutions stay in cuDNN.
CONV = frozenset({"depthwise_conv"})
# torch.cat along one dim: anchors one kernel of kind "reduce" (codegen/concat.py) that reads each
# part where it lies and writes the result, with a pointwise epilogue on it.
CONCAT = frozenset({"cat"})
ANCHORS = REDUCTION | ROWWISE | NORM | POOL | CONV | CONCAT
LEAVES = frozenset({"input", "param"})
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
# What our own anchor kernels (norms, pools, depthwise convolutions) compute in; fp64 stays in PyTorch.
KERNEL_DTYPES = frozenset({"float32", "float16", "bfloat16"})
# Reshapes: the same elements in the same order under a new shape (a reshape may copy, its values do not change).
VIEWS = frozenset({"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"})


@dataclass(frozen=True)
class Node:
    """One value: `name = op(*args)`; args are node names (str) or Python constants."""

    name: str
    op: str  # "input" | "param" | a POINTWISE op | "aten" (a call kept in PyTorch) | "getitem"
    args: tuple = ()
    shape: tuple = ()
    dtype: str = "float32"
    target: str = ""  # input: forward arg name; param: "conv.weight"; aten: "aten.add.Tensor"
    attrs: tuple = ()  # sorted (key, value) pairs: op parameters, aten kwargs
    origin: str = ""  # the line of `forward` this came from
    stride: tuple = ()  # element strides of the captured value (views need not be contiguous)

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def is_pointwise(self) -> bool:
        return self.op in POINTWISE

    @property
    def is_anchor(self) -> bool:
        return self.op in ANCHORS

    def attr(self, key, default=None):
        return dict(self.attrs).get(key, default)

    def inputs(self) -> list[str]:
        """Names of the nodes this one reads (nested lists included, in order)."""
        return [a for a in flat_args(self.args) if isinstance(a, Ref)]


class Ref(str):
    """A node name used as an argument (distinguishes references from string constants)."""

    __slots__ = ()


@dataclass(frozen=True)
class Dim:
    """A size forward reads from an input at run time (`x.shape[1]`): a view's size, or a made tensor's
    (`zeros(layers, x.shape[0], H)`), where that dim is a runtime size (plan/batch.py)."""

    of: str  # the input's node name
    dim: int

    def __repr__(self) -> str:  # NOTE: as `explain` prints a graph: `x0.shape[1]`
        return f"{self.of}.shape[{self.dim}]"


def flat_args(args):
    """Every argument, nested lists and tuples opened."""
    for a in args:
        if isinstance(a, (list, tuple)) and not isinstance(a, Ref):
            yield from flat_args(a)
        else:
            yield a


def map_refs(args, fn):
    """Rebuild `args` with every Ref replaced by fn(ref) (fn may return a constant)."""
    out = []
    for a in args:
        if isinstance(a, Ref):
            out.append(fn(a))
        elif isinstance(a, (list, tuple)):
            out.append(type(a)(map_refs(a, fn)))
        else:
            out.append(a)
    return tuple(out)


@dataclass(frozen=True)
class Graph:
    """Nodes in topological order and the names of the outputs."""

    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    single_output: bool = True
    log: tuple[str, ...] = field(default=(), compare=False)  # rewrites applied, for explain
    # state forward assigns anew (`self.hidden = ...`: capture/state.py): the last len(writes) outputs are
    # their new values, which forward writes back; the outputs it returns come first
    writes: tuple[str, ...] = ()

    def by_name(self) -> dict[str, Node]:
        """{name: node}, a fresh dict each call (callers may add to it); NOTE: built once per graph and
        copied, since codegen asks for it once per kernel (a long unrolled loop has thousands)."""
        table = self.__dict__.get("_by_name")
        if table is None:
            table = {n.name: n for n in self.nodes}
            object.__setattr__(self, "_by_name", table)
        return dict(table)

    def users(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for r in n.inputs():
                out[r].append(n.name)
        for o in self.outputs:
            out[o].append("<output>")
        return out

    def with_log(self, *lines: str) -> "Graph":
        return replace(self, log=self.log + lines)

    def __str__(self) -> str:
        return format_graph(self)


@dataclass(frozen=True)
class Kernel:
    """One fused kernel: member nodes in order, tensors read, values written, iteration shape."""

    name: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    shape: tuple[int, ...]  # reduce kernels: the shape of the anchor's input; depthwise: its output's
    kind: str = "pointwise"  # or "reduce" / "pool": one anchor with its prologue and epilogue; "depthwise": conv + epilogue
    anchor: str = ""
    sms: int = 0  # reduce kernels: the multiprocessors their launch is sized for (tiling.layout; 0: its default)
    batch: int = 0  # the captured size of its leading `lead` dims (the batch, or its tokens, times a constant)
    # where that is a runtime size, else 0
    lead: int = 1  # the dims `batch` spans: 2 where the sequence length is a runtime size too (dims 0 and 1)


@dataclass(frozen=True)
class Guard:
    """What forward checks besides its inputs before it runs the kernels (any check failing sends
    the call to the original forward)."""

    params: tuple[str, ...] = ()  # parameters and buffers the kernels read: their dtype and device
    shapes: tuple[str, ...] = ()  # of those, the ones a kernel is built for the shape of (a depthwise weight)
    modes: tuple[tuple[str, bool], ...] = ()  # (module path, training) of each norm the graph depends on the mode of
    grads: tuple[str, ...] = ()  # parameters and buffers forward reads: with grad mode on, one requiring grad takes the original
    batch: tuple[int, int] = ()  # (captured, largest): dim 0 of every tensor input is a runtime size up to the largest
    # (with `seq`: the largest product of dims 0 and 1, the tokens)
    seq: int = 0  # the captured size of dim 1 of every tensor input (the sequence) where that is a runtime size too


@dataclass(frozen=True)
class Plan:
    """Forward as library calls and fused kernels, in order, and every decision on how they run.

    plan/ makes each decision once and records it here (plan.plan); emit prints them; explain shows them.
    """

    graph: Graph
    kernels: tuple[Kernel, ...]
    steps: tuple[str, ...]  # execution order: node names (run in PyTorch) and kernel names
    # convolution -> the memory format `_tw_conv` hands its output on in (None: as made), in site order;
    # empty where convolutions run as the original does (plan/conv_sites.py)
    conv_sites: dict[str, str | None] = field(default_factory=dict)
    # plan/conv_layout.ConvLayouts: the values kernels may read as a channels-last convolution made them
    layouts: object = None
    # kernel after a GEMM -> its GemmSite (the ways it may run), or why it runs ours alone (plan/gemm_sites.py)
    gemm_sites: dict = field(default_factory=dict)
    # GEMM node -> plan/gemm_ours.OursGemm (our kernel runs it) or why not; empty unless Options.gemm
    gemm_ours: dict = field(default_factory=dict)
    # convolution node -> plan/conv_ours.OursConv (our kernel runs it) or why not; empty unless Options.conv_ours
    conv_ours: dict = field(default_factory=dict)
    packed_weights: dict[str, str] = field(default_factory=dict)  # transpose -> parameter read packed (in, out)
    written_over: dict[str, str] = field(default_factory=dict)  # kernel output -> the operand it overwrites
    # kernel output -> (copy_ node, parameter or buffer): the kernel writes it there itself (plan/memory.py)
    written_into: dict[str, tuple[str, str]] = field(default_factory=dict)
    elided_views: dict[str, str] = field(default_factory=dict)  # view never made -> the tensor kernels read instead
    guard: Guard = Guard()
    graph_blockers: tuple[str, ...] = ()  # why forward cannot be replayed as a CUDA graph (plan/guard.py)
    cuda_graph: bool = False  # the fast path is replayed as a CUDA graph (asked for, and nothing blocks it)
    # values built from constants (and parameters) alone, made once per device and parameter version (plan/held.py)
    held: tuple[str, ...] = ()

    def kernel(self, name: str) -> Kernel | None:
        table = self.__dict__.get("_kernel_table")  # NOTE: built once per plan: asked once per step
        if table is None:
            table = {}
            for k in self.kernels:
                table.setdefault(k.name, k)
            object.__setattr__(self, "_kernel_table", table)
        return table.get(name)

    @property
    def timed_gemm_sites(self) -> dict:
        """{kernel: GemmSite} for the kernels offered a way besides ours, timed by `_tw_lt`."""
        return {k: site for k, site in self.gemm_sites.items() if not isinstance(site, str)}


def short_dtype(dtype: str) -> str:
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "bool": "b8"}.get(dtype, dtype)


def format_arg(a) -> str:
    if isinstance(a, Ref):
        return str(a)
    if isinstance(a, float):
        return repr(a)
    if isinstance(a, (list, tuple)):
        inner = ", ".join(format_arg(x) for x in a)
        return f"[{inner}]"
    return repr(a)


def format_node(n: Node) -> str:
    """`v3 = add(v1, v2)  # (16, 64) f32` — one line of Python."""
    if n.op == "input":
        rhs = f"input({n.target!r})"
    elif n.op == "param":
        rhs = f"self.{n.target}"
    elif n.op == "getitem":
        rhs = f"{n.args[0]}[{n.args[1]}]"
    else:
        fn = n.target if n.op == "aten" else n.op
        parts = [format_arg(a) for a in n.args] + [f"{k}={format_arg(v)}" for k, v in n.attrs]
        rhs = f"{fn}({', '.join(parts)})"
    return f"{n.name} = {rhs}  # {tuple(n.shape)} {short_dtype(n.dtype)}"


def format_graph(g: Graph) -> str:
    lines = ["def forward(...):"] + ["    " + format_node(n) for n in g.nodes]
    outs = ", ".join(g.outputs)
    lines.append(f"    return {outs if g.single_output else '(' + outs + ',)'}")
    return "\n".join(lines)


def broadcast_shape(*shapes: tuple) -> tuple:
    """Right-aligned broadcast of several shapes (raises ValueError if incompatible)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        sizes = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcasts_to(small: tuple, big: tuple) -> bool:
    try:
        return broadcast_shape(small, big) == tuple(big)
    except ValueError:
        return False


def reduce_geometry(n: Node, in_shape: tuple) -> tuple[int, int, int] | None:
    """(outer, reduced, inner) sizes of an anchor's input seen as [O, R, I], reducing over R.

    None where the reduced dims are not one run in memory order (size-1 dims aside). batch_norm
    reduces over N and H*W and keeps C: its triple is (N, C, H*W) with C kept.
    """
    if n.op == "group_norm":
        groups = n.attr("groups")
        return in_shape[0] * groups, prod(in_shape[1:]) // groups, 1
    if n.op == "batch_norm":
        return in_shape[0], in_shape[1], prod(in_shape[2:])
    if n.op == "instance_norm":
        return in_shape[0] * in_shape[1], prod(in_shape[2:]), 1
    dims = n.attr("dims")
    big = [d for d in dims if in_shape[d] != 1] or list(dims[:1])
    if not big:
        return 1, 1, prod(in_shape)
    lo, hi = min(big), max(big)
    if any(in_shape[d] != 1 and d not in dims for d in range(lo, hi + 1)):
        return None
    return prod(in_shape[:lo]), prod(in_shape[d] for d in dims), prod(in_shape[hi + 1:])


def ancestors_in(name: str, members: set[str], nodes: dict[str, Node]) -> set[str]:
    """Members that `name` depends on: a reduce kernel's prologue."""
    out, stack = set(), [name]
    while stack:
        for r in nodes[stack.pop()].inputs():
            if r in members and r not in out:
                out.add(r)
                stack.append(r)
    return out
