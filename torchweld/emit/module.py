"""Emit: the standalone ModelNew file (needs PyTorch alone: no torchweld import at run time)."""
from __future__ import annotations

import ast
import math
from math import prod

import torch

from torchweld.codegen import (contiguous_strides, is_contiguous, memory_order, module_source, operands, out_strides,
                               py_lit, reduce_launch, reduce_traffic, torch_expr, variant_aligned, variant_name,
                               vec_class, vector_width)
from torchweld.simplify.conv_fold import FOLD, describe_stages, fold_call, fold_header, fold_source
from torchweld.plan.conv_layout import FORMATS, ConvLayouts, conv_layouts, moved
from torchweld.ir import LIBRARY, Graph, Node, Ref, flat_args, format_node
from torchweld.tiling import ITEMSIZE
from torchweld.simplify.library_bias import VIEWS
from torchweld.plan.gemm_pack import packed_weights
from torchweld.plan.gemm_sites import GemmSite, describe_decision, lt_decisions, lt_sites
from torchweld.ir import Kernel, Plan
from torchweld.emit.runtime import pasted

CONV = "aten.convolution.default"
PRECISIONS = ("fp32", "tf32")


class EmitError(Exception):
    """The problem's source cannot be turned into a ModelNew file."""


def _source_parts(source: str) -> tuple[list[str], ast.ClassDef, list[str]]:
    """Module-level code to keep (imports, helpers, constants), the Model class, and its methods."""
    tree = ast.parse(source)
    keep, model = [], None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            model = node
        elif isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            continue
        elif isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the problem's docstring
        else:
            keep.append(ast.get_source_segment(source, node, padded=True))
    if model is None:
        raise EmitError("the problem source has no top-level `class Model`")
    return keep, model, source.splitlines()


def _method_source(source_lines: list[str], fn: ast.FunctionDef, new_name: str | None = None) -> str:
    start = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
    lines = source_lines[start:fn.end_lineno]
    text = "\n".join(lines)
    text = text.replace("super(Model, self)", "super()")
    if new_name:
        text = text.replace(f"def {fn.name}(", f"def {new_name}(", 1)
    indent = len(lines[0]) - len(lines[0].lstrip())
    return "\n".join("    " + line[indent:] if line.strip() else "" for line in text.splitlines())


class _Names:
    """Python expression for each IR value inside the emitted forward."""

    def __init__(self, graph: Graph):
        self.nodes = graph.by_name()

    def expr(self, a) -> str:
        if isinstance(a, Ref):
            n = self.nodes[a]
            if n.op == "param":
                return n.name  # fetched once at the top of forward (`_state_path`)
            if n.op == "input":
                return n.target
            return str(a)
        if isinstance(a, (list, tuple)):
            inner = ", ".join(self.expr(x) for x in a)
            return f"[{inner}]"
        if isinstance(a, torch.dtype):
            return str(a)
        if isinstance(a, torch.device):
            return "_dev"
        if isinstance(a, torch.layout):
            return str(a)
        if isinstance(a, torch.memory_format):
            return str(a)
        if isinstance(a, float) and not math.isfinite(a):
            return py_lit(a)
        return repr(a)


# Aten calls written as PyTorch's own Python API: `torch.ops.aten.X.overload(...)` parses its
# arguments against the schema in Python, 2-4 us more per call than the C++-bound function, which
# is as much as a small kernel's run. Each entry: (method or function, positional args it takes).
_PYTHON_API = {
    "aten.view.default": (".view", 2), "aten._unsafe_view.default": (".view", 2),
    "aten.reshape.default": (".reshape", 2), "aten.t.default": (".t", 1),
    "aten.permute.default": (".permute", 2), "aten.transpose.int": (".transpose", 3),
    "aten.expand.default": (".expand", 2), "aten.unsqueeze.default": (".unsqueeze", 2),
    "aten.squeeze.dim": (".squeeze", 2), "aten.clone.default": (".clone", 1),
    "aten.add_.Tensor": (".add_", 2), "aten.mm.default": ("torch.mm", 2), "aten.bmm.default": ("torch.bmm", 2),
    "aten.addmm.default": ("torch.addmm", 3), "aten.convolution.default": ("torch.convolution", 9),
    "aten.scaled_dot_product_attention.default": ("F.scaled_dot_product_attention", 6),
    "aten.mv.default": ("torch.mv", 2), "aten.sum.dim_IntList": ("torch.sum", 3),
    "aten.baddbmm.default": ("torch.baddbmm", 3), "aten.mean.dim": ("torch.mean", 3),
    "aten.repeat.default": (".repeat", 2), "aten.copy_.default": (".copy_", 2),
    "aten.split.Tensor": ("torch.split", 3),
}


def _aten_call(n: Node, names: _Names) -> str:
    """`n`'s aten call as Python: the C++-bound API where it is known, else torch.ops."""
    args = [names.expr(a) for a in n.args]
    kwargs = [f"{k}={names.expr(v)}" for k, v in n.attrs]
    api = _PYTHON_API.get(n.target)
    if api is not None and len(args) <= api[1] and (api[0] != ".clone" or not kwargs):
        fn, _ = api
        if fn.startswith("."):
            return f"{args[0]}{fn}({', '.join(args[1:] + kwargs)})"
        return f"{fn}({', '.join(args + kwargs)})"
    return f"torch.ops.{n.target}({', '.join(args + kwargs)})"


def _module_path(dotted: str) -> str:
    """`self._modules['a']._modules['b']` for module path "a.b": dict lookups, where `self.a.b`
    runs nn.Module.__getattr__ in Python twice (about a microsecond each, on every call)."""
    return "self" + "".join(f"._modules[{part!r}]" for part in dotted.split(".") if part)


def _state_path(n: Node) -> str:
    """The expression that fetches parameter or buffer `n` from the module, fast."""
    owner, _, leaf = n.target.rpartition(".")
    table = "_buffers" if n.attr("buffer") else "_parameters"
    return f"{_module_path(owner)}.{table}[{leaf!r}]"


def _aten_line(n: Node, names: _Names) -> str:
    return f"{n.name} = {_aten_call(n, names)}"


def _elided_views(plan: Plan) -> dict[str, Ref]:
    """Views of a parameter (or a folded bias) read only by kernels: not made, the kernel reads the
    tensor's own memory, which is the same (each `.view()` costs about a microsecond per call)."""
    graph = plan.graph
    nodes, users = graph.by_name(), graph.users()
    in_kernels = {m for k in plan.kernels for m in k.nodes}
    return {n.name: n.args[0] for n in graph.nodes
            if n.op == "aten" and n.target in VIEWS and n.args and isinstance(n.args[0], Ref)
            and (nodes[n.args[0]].op == "param" or fold_source(n.args[0], nodes)) and _stride_spec(n) is None
            and _stride_spec(nodes[n.args[0]]) is None and users[n.name]
            and all(u in in_kernels for u in users[n.name])}


def _guard_conditions(plan: Plan, inputs: list[Node], same_init: bool) -> list[str]:
    """Forward's guard, one condition each: any true one sends the call to the original forward."""
    nodes = plan.graph.by_name()
    tensors = [n for n in inputs if n.attr("value") is None]
    conds = ["not self._tw_same_init"] * same_init + [
        f"{n.target}.shape != {tuple(n.shape)!r} or {n.target}.dtype != torch.{n.dtype}" for n in tensors]
    conds += [f"{n.target} != {n.attr('value')!r}" for n in inputs if n not in tensors]
    if tensors:  # NOTE: kernels launch on the current device: every tensor they read must live there
        first = tensors[0].target
        conds.append(f"not {first}.is_cuda or {first}.get_device() != torch.cuda.current_device()")
        conds += [f"{n.target}.get_device() != {first}.get_device()" for n in tensors[1:]]
        conds += [f"{p}.dtype != torch.{nodes[r].dtype} or {p}.get_device() != {first}.get_device()"
                  for r, p in _kernel_params(plan)]
        # NOTE: a depthwise kernel is built for its weight's shape (kernel size, channels): another
        # one (a constructor given another kernel_size) takes the general path.
        conv_state = {fold_source(w, nodes) or w for w in (nodes[k.anchor].args[1] for k in plan.kernels
                                                             if k.kind == "depthwise")}
        conds += [f"{p}.shape != {tuple(nodes[r].shape)!r}" for r, p in _kernel_params(plan) if r in conv_state]
    conds += [f"{_module_path(m)}.training is not {t}" for m, t in _norm_modes(plan.graph)]
    return conds


def _conv_to(n: Node, layouts: ConvLayouts) -> str:
    """`_tw_conv`'s `to` argument for convolution `n`: None where its readers take either layout,
    else the captured layout (NCHW, the default, or channels-last where the original made that)."""
    if n.name in layouts.keep:
        return ", to=None"
    fmt = FORMATS.get(len(n.shape))
    if fmt is not None and not moved(n, torch.empty(tuple(n.shape), device="meta", memory_format=fmt).stride()):
        return f", to=torch.{str(fmt).split('.')[-1]}"
    return ""


def _forward(plan: Plan, inputs: list[Node], signature: str, layout_plan: bool, tf32: bool,
             cuda_graph: bool = False, same_init: bool = False, layouts: ConvLayouts = ConvLayouts()) -> list[str]:
    graph = plan.graph
    sites: dict[str, int] = {}  # convolution node -> its layout-planning site
    names = _Names(graph)
    nodes, users = graph.by_name(), graph.users()
    elided = _elided_views(plan)
    lt = lt_sites(plan)
    in_lt = {m for e in lt.values() for m in (e.gemm, *e.views)}  # made inside `_lt_<kernel>`
    packed = packed_weights(graph)
    into = copies_into(plan)
    used = {elided.get(a, a) for step in plan.steps for a in (plan.kernel(step).inputs if plan.kernel(step) else
                                                                (nodes[step].inputs() if step in nodes else ()))}
    state = [n for n in graph.nodes if n.op == "param" and n.name in used]
    tensors = [n for n in inputs if n.attr("value") is None]
    conds = _guard_conditions(plan, inputs, same_init)
    guard = "\n                or ".join(conds) or "False"
    arg_names = ", ".join(n.target for n in inputs)
    body = [f"    def forward({signature}):",
            *(["        # NOTE: parameters and buffers are fetched once, by dict lookups (`self.conv.weight`"
               " costs microseconds)."] if state else []),
            *[f"        {n.name} = {_state_path(n)}  # self.{n.target}" for n in state],
            "        # NOTE: kernels are specialised to the captured shapes; other inputs take the general path.",
            f"        if ({guard}):",
            f"            return self._tw_general({arg_names})"]
    if any(isinstance(a, torch.device) for n in graph.nodes for a in flat_args(n.args + tuple(v for _, v in n.attrs))):
        body.append(f"        _dev = {tensors[0].target}.device" if tensors else "        _dev = torch.device('cuda')")
    for step in plan.steps:
        k = plan.kernel(step)
        if k is not None and k.name in lt:
            e = lt[k.name]
            outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
            args = ", ".join(_lt_params(e, k, names, elided))
            body.append(f"        {outs} = _tw_lt(self, {k.name!r}, _lt_{k.name}, {e.ways!r}, {args})"
                        f"  # library and {k.name}: the fastest of {', '.join(e.ways)}")
            continue
        if k is not None:
            outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
            args = ", ".join([names.expr(Ref(elided.get(a, a))) for a in k.inputs]
                             + [names.expr(Ref(into[o][1])) for o in k.outputs if o in into])
            ops = "; ".join(format_node(nodes[m]).split("  #")[0] for m in k.nodes)
            body.append(f"        {outs} = _{k.name}({args})  # {ops}")
            continue
        n = nodes[step]
        if n.op in ("input", "param") or n.name in elided or n.name in in_lt:
            continue
        if n.op == "aten" and n.target == COPY and n.args[1] in into:  # the kernel wrote it there
            if users[n.name]:
                body.append(f"        {n.name} = {names.expr(n.args[0])}  # written by the kernel that made {n.args[1]}")
            continue
        if n.op == FOLD:
            body.append(f"        {fold_call(n, nodes, users, names.expr)}  # {describe_stages(n.args[2:], nodes)}")
        elif n.op == "getitem" and nodes[n.args[0]].op == FOLD:
            continue  # unpacked by the fold's line
        elif n.op == "getitem":
            body.append(f"        {n.name} = {names.expr(n.args[0])}[{n.args[1]!r}]")
        elif n.name in packed:
            p = names.expr(Ref(packed[n.name]))
            body.append(f"        {n.name} = _tw_pack(self, {n.name!r}, {p})  # {p}.t(), laid out (in, out) once per version")
        elif n.op == "aten" and n.target == CONV and layout_plan:
            args = ", ".join(names.expr(a) for a in n.args)
            site = sites.setdefault(n.name, len(sites))
            note = "; channels-last goes on as made" if n.name in layouts.keep else ""
            body.append(f"        {n.name} = _tw_conv(self, {site}, {args}{_conv_to(n, layouts)})  # library{note}")
        elif n.op == "aten":
            note = "  # library" if n.target in LIBRARY else ""
            body.append(f"        {_aten_line(n, names)}{note}")
        else:
            args = [names.expr(a) for a in n.args]
            body.append(f"        {n.name} = {torch_expr(n, args)}")
    outs = [names.expr(Ref(o)) for o in graph.outputs]
    body.append(f"        return {outs[0] if graph.single_output else '(' + ', '.join(outs) + ',)'}")
    start = body.index(f"            return self._tw_general({arg_names})") + 1
    if tf32:  # the fast path runs with TF32 allowed in cuBLAS and cuDNN, and puts the flags back after
        body[start:] = (["        _tw_was = _tw_tf32((True, True))", "        try:"]
                        + ["    " + line for line in body[start:]]
                        + ["        finally:", "            _tw_tf32(_tw_was)"])
    if cuda_graph:  # the fast path becomes a method, replayed as a CUDA graph
        fast_args = ", ".join([n.target for n in inputs] + [n.name for n in state])
        ins = ", ".join(n.target for n in inputs) + ("," if len(inputs) == 1 else "")
        st = ", ".join(n.name for n in state) + ("," if len(state) == 1 else "")
        fast = body[start:]
        body[start:] = [f"        return _tw_graphed(self, ({ins}), ({st}), self._tw_fast)", "",
                        f"    def _tw_fast(self, {fast_args}):",
                        '        """The fast path, captured once as a CUDA graph by `_tw_graphed`."""', *fast]
    return body


def graph_blockers(graph: Graph) -> list[str]:
    """Why the forward cannot be replayed as a CUDA graph (empty: it can)."""
    why = []
    if any(n.op == "aten" and n.target.split(".")[1].endswith("_") for n in graph.nodes):
        why.append("it updates buffers in place (a replayed warm-up would update them again)")
    if any(n.op == "batch_norm" for n in graph.nodes):
        why.append("a training-mode batch norm updates its running statistics")
    if not any(n.op == "input" and n.attr("value") is None for n in graph.nodes):
        why.append("it takes no tensor input")
    return why


def _kernel_params(plan: Plan) -> list[tuple[str, str]]:
    """(node, expression) for each parameter a kernel reads, directly or through a view (a bias moved
    into the kernel), or through a fold (the weight it was folded from)."""
    nodes = plan.graph.by_name()
    names = _Names(plan.graph)
    found = []
    for k in plan.kernels:
        for a in k.inputs:
            n = nodes[a]
            if n.op == "aten" and n.target in VIEWS and n.args and isinstance(n.args[0], Ref):
                n = nodes[n.args[0]]
            if fold_source(n.name, nodes):  # NOTE: a folded tensor has its conv weight's dtype and device
                n = nodes[fold_source(n.name, nodes)]
            if n.op == "param" and n.name not in (r for r, _ in found):
                found.append((n.name, names.expr(Ref(n.name))))
    return found


def _norm_modes(graph: Graph) -> list[tuple[str, bool]]:
    """(module, training) for each batch norm whose mode the captured graph depends on."""
    out = []
    for n in graph.nodes:
        if n.op != "param" or n.target.split(".")[-1] != "running_mean":
            continue
        readers = [m for m in graph.nodes if n.name in m.inputs()]
        if not readers:
            continue
        readers += [r for m in readers if m.target == "aten.repeat.default"  # instance norm's repeated stats
                    for r in graph.nodes if m.name in r.inputs()]
        training = any(m.op in ("batch_norm", "instance_norm") or (m.target == "aten.native_batch_norm.default"
                                                                  and bool(m.args[5])) for m in readers)
        path = n.target.rsplit(".", 1)[0] if "." in n.target else ""
        out.append((path, training))
    return out


def _prepare(names: list[str], nodes: dict, contiguous: tuple = ()) -> list[str]:
    """Lay a kernel's operands out as it indexes them (`contiguous`: those it reads contiguous
    whatever their captured strides). Their device, dtype and shape need no check here: forward's
    guard checked the inputs and parameters, and values made inside forward follow."""
    lines = []
    for a in names:
        stride = None if a in contiguous else _stride_spec(nodes[a])
        if stride is None:
            lines.append(f"    if not a_{a}.is_contiguous():")
            lines.append(f"        a_{a} = a_{a}.contiguous()")
        else:
            lines.append(f"    a_{a} = _tw_layout(a_{a}, {tuple(nodes[a].shape)!r}, {stride!r})")
    return lines


def _allocate(out: str, shape: tuple, dtype, operands: list[Node]) -> str:
    """The output buffer: `empty_like` of an operand of the same shape and dtype is the cheapest call."""
    like = next((o for o in operands if tuple(o.shape) == tuple(shape) and o.dtype == dtype), None)
    if like is not None:
        return f"    out_{out} = torch.empty_like(a_{like.name}, memory_format=torch.contiguous_format)"
    return f"    out_{out} = torch.empty({tuple(shape)!r}, dtype=torch.{dtype}, device=dev)"


def _view_root(n: Node, nodes: dict) -> Node:
    """The node `n` is a view of (through view/reshape), or `n` itself."""
    while n.op == "aten" and n.target in VIEWS and n.args and isinstance(n.args[0], Ref):
        n = nodes[n.args[0]]
    return n


def reusable(k: Kernel, graph: Graph, made: frozenset = frozenset(), alt: dict | None = None) -> dict[str, str]:
    """{output: operand} for outputs a pointwise kernel may write over an operand: one read at the
    output's own index (same shape, contiguous), of the same dtype, that forward made itself (a
    library call's result or a kernel's output, through views that nothing else reads), read by this
    kernel alone and not returned. Each thread reads its elements before it writes them, so the
    write is safe; it saves an allocation and the pass's write traffic to new memory (the GELU after
    a 4096x2048 GEMM: 21 -> 16 us on the H100).

    NOTE: never with `alt`: the channels-last build reads tiles through shared memory, and a thread
    may write an element another thread has yet to read. `made`: the other kernels' outputs."""
    if k.kind != "pointwise" or alt:
        return {}
    nodes, users = graph.by_name(), graph.users()
    found: dict[str, str] = {}
    for o in operands(k, graph):
        if not o.full or not _owned(o.name, k, nodes, users, made):
            continue
        out = next((x for x in k.outputs if x not in found and nodes[x].dtype == o.dtype), None)
        if out is not None:
            found[out] = o.name
    return found


def _owned(name: str, k: Kernel, nodes: dict, users: dict, made: frozenset) -> bool:
    """`name` is forward's own tensor, reached through views each read by the next alone, and read
    by `k` alone."""
    if any(u == "<output>" or u not in k.nodes for u in users[name]):
        return False
    n = nodes[name]
    root = _view_root(n, nodes)
    while n is not root:  # NOTE: library results and kernel outputs are tensors of their own, no one else's
        src = nodes[n.args[0]]
        if users[src.name] != [n.name]:
            return False
        n = src
    return n.op == "aten" and n.target in LIBRARY or n.name in made


COPY = "aten.copy_.default"


def copies_into(plan: Plan) -> dict[str, tuple[str, str]]:
    """{kernel output: (copy_ node, parameter or buffer)} where forward's `P.copy_(K)` may become the
    kernel writing K into P itself: K is read by that copy alone and has P's shape and dtype; the
    kernel reads no view of P, and nothing reads P between the kernel and the copy (it would see the
    new values early). Saves the copy's launch and a buffer (an instance norm's running statistics:
    the mean over the batch written straight into the module's buffer)."""
    graph = plan.graph
    nodes, users = graph.by_name(), graph.users()
    kernel_of = {o: k for k in plan.kernels for o in k.outputs}
    at = {s: i for i, s in enumerate(plan.steps)}

    def reads(step) -> list[str]:
        k = plan.kernel(step)
        return list(k.inputs) if k is not None else (nodes[step].inputs() if step in nodes else [])

    sites = lt_sites(plan)  # NOTE: `_lt_<kernel>` calls its kernel with the kernel's own operands only
    out = {}
    for n in graph.nodes:
        if n.op != "aten" or n.target != COPY or len(n.args) != 2 or n.attrs or not all(isinstance(a, Ref) for a in n.args):
            continue
        dst, src = nodes[n.args[0]], n.args[1]
        k = kernel_of.get(src)
        if (k is None or dst.op != "param" or users[src] != [n.name] or tuple(dst.shape) != tuple(nodes[src].shape)
                or dst.dtype != nodes[src].dtype or not is_contiguous(dst) or k.kind not in ("pointwise", "reduce")
                or k.name not in at or n.name not in at or k.name in sites):
            continue
        between = plan.steps[at[k.name]:at[n.name]]  # the kernel's own reads included
        if any(_view_root(nodes[a], nodes).name == dst.name for step in between for a in reads(step)):
            continue
        out[src] = (n.name, dst.name)
    return out


def _into_lines(into: dict[str, str], outs: list[str]) -> tuple[list[str], list[str]]:
    """(allocation lines, lines before the return) for outputs written into a parameter or buffer:
    into it where it is contiguous and 16-byte aligned (the kernels store vectors), else into a new
    buffer copied over after the launch."""
    alloc, after = [], []
    for o in outs:
        if o in into:
            p = f"a_{into[o]}"
            alloc.append(f"    out_{o} = {p} if {p}.is_contiguous() and {p}.data_ptr() % 16 == 0 else "
                         f"torch.empty_like({p}, memory_format=torch.contiguous_format)")
            after += [f"    if out_{o} is not {p}:", f"        {p}.copy_(out_{o})"]
    return alloc, after


def _launch(k: Kernel, ptrs: list[str], vec: str, first: str, cl_vec: str | None = None) -> list[str]:
    """The launch and its check; `cl_vec` given: the `_cl` build where `cl` (see `_pick_build`)."""
    stream = f"_tw_stream({first}.get_device())" if first else "_tw_stream(torch.cuda.current_device())"
    call = f"    err = _LIB.tw_launch_{k.name}({', '.join(ptrs)}, {vec}, {stream})"
    if cl_vec is not None:
        cl_call = f"        err = _LIB.tw_launch_{variant_name(k)}({', '.join(ptrs)}, {cl_vec}, {stream})"
        return ["    if cl:", cl_call, "    else:", "    " + call, "    if err:", f"        _tw_fail({k.name!r}, err)"]
    return [call, "    if err:", f"        _tw_fail({k.name!r}, err)"]


def _pick_build(alt: dict[str, tuple], nodes: dict) -> list[str]:
    """Lines setting `cl`: every operand in `alt` has the strides a channels-last convolution gives
    it, which the `_cl` build reads as they are; else they are laid out as captured."""
    test = " and ".join(f"a_{a}.stride() == {s!r}" for a, s in alt.items())
    return [f"    cl = {test}",
            "    if not cl:  # NOTE: the convolution ran NCHW (no copy), or other strides: laid out as captured",
            *["    " + line for line in _prepare(list(alt), nodes)]]


def _aligned_test(pairs) -> str:
    """`int(...)`: every (operand, bytes) pointer aligned; "1" where none needs testing."""
    checks = [f"a_{n}.data_ptr() % {b} == 0" for n, b in pairs]
    return f"int({' and '.join(checks)})" if checks else "1"


def _reduce_wrapper(k: Kernel, graph: Graph, into: dict[str, str] | None = None) -> str:
    """Like `_wrapper`, for a reduce or depthwise kernel: outputs take their own shapes; no vector build."""
    nodes = graph.by_name()
    into = {o: d for o, d in (into or {}).items() if o in k.outputs}
    params = ", ".join([f"a_{a}" for a in k.inputs] + [f"a_{d}" for d in into.values()])
    anchor = nodes[k.anchor]
    lines = [
        f"def _{k.name}({params}):",
        f'    """{k.name}: {anchor.op} with {len(k.nodes) - 1} fused pointwise ops; see its CUDA source above."""',
    ]
    in_place = [a for a in anchor.args[3:5] if isinstance(a, Ref)] if anchor.op in ("batch_norm", "instance_norm") else []
    if in_place:  # NOTE: the kernel updates the running statistics in place: a copy would lose the update
        lines.append(f"    assert {' and '.join(f'a_{a}.is_contiguous()' for a in in_place)}")
    flat = tuple(anchor.args[:2]) if k.kind == "depthwise" else ()  # the convolution's input and weight
    lines += _prepare([a for a in k.inputs if a not in in_place], nodes, flat)
    operand_nodes = [nodes[a] for a in k.inputs]
    into_alloc, after = _into_lines(into, list(k.outputs))
    allocs = [into_alloc.pop(0) if o in into else _allocate(o, nodes[o].shape, nodes[o].dtype, operand_nodes)
              for o in k.outputs]
    if any("device=dev" in a for a in allocs):
        lines.append(f"    dev = a_{k.inputs[0]}.device")
    lines += allocs
    ptrs = [f"a_{a}.data_ptr()" for a in k.inputs] + [f"out_{o}.data_ptr()" for o in k.outputs]
    if k.kind == "depthwise":
        lines += _launch(k, ptrs, "0", f"a_{k.inputs[0]}")
        lines.append(f"    return {', '.join(f'out_{o}' for o in k.outputs)},")
        return "\n".join(lines)
    launch = reduce_launch(k, graph)
    if launch.workspace:  # NOTE: per call, so that calls on two streams never share partial results
        lines.append(f"    ws = torch.empty({launch.workspace}, dtype=torch.float32, device=a_{k.inputs[0]}.device)")
        ptrs.append("ws.data_ptr()")
    vec = "0"
    if launch.vec > 1:
        # NOTE: outputs come from the caching allocator (512-byte aligned blocks): only operands are tested
        checks = [f"a_{n}.data_ptr() % {b} == 0" for n, b in launch.aligned if n not in k.outputs]
        vec = f"int({' and '.join(checks)})" if checks else "1"
    lines += _launch(k, ptrs, vec, f"a_{k.inputs[0]}") + after
    outs = ", ".join(f"out_{o}" for o in k.outputs)
    lines.append(f"    return {outs}{',' if len(k.outputs) == 1 else ''}")
    return "\n".join(lines)


def _pool_wrapper(k: Kernel, graph: Graph, alt: dict[str, tuple]) -> str:
    """Like `_reduce_wrapper`, for a pool kernel: each output in the layout the kernel writes."""
    nodes = graph.by_name()
    anchor = nodes[k.anchor]
    order = memory_order(nodes[anchor.args[0]].shape, nodes[anchor.args[0]].stride)
    lines = [
        f"def _{k.name}({', '.join(f'a_{a}' for a in k.inputs)}):",
        f'    """{k.name}: {anchor.op} with {len(k.nodes) - 1} fused pointwise ops; see its CUDA source above."""',
        *(_pick_build(alt, nodes) if alt else []),
        *_prepare([a for a in k.inputs if a not in alt], nodes),
    ]
    allocs = []
    for o in k.outputs:
        shape, stride = tuple(nodes[o].shape), out_strides(nodes[o], order)
        allocs.append(_allocate(o, shape, nodes[o].dtype, [nodes[a] for a in k.inputs])
                      if stride == contiguous_strides(shape) else
                      f"    out_{o} = torch.empty_strided({shape!r}, {stride!r}, dtype=torch.{nodes[o].dtype}, device=dev)")
    if any("device=dev" in a for a in allocs):
        lines.append(f"    dev = a_{k.inputs[0]}.device")
    lines += allocs
    ptrs = [f"a_{a}.data_ptr()" for a in k.inputs] + [f"out_{o}.data_ptr()" for o in k.outputs]
    lines += _launch(k, ptrs, "0", f"a_{k.inputs[0]}", "0" if alt else None)
    lines.append(f"    return {', '.join(f'out_{o}' for o in k.outputs)},")
    return "\n".join(lines)


def _wrapper(k: Kernel, graph: Graph, alt: dict[str, tuple] | None = None, made: frozenset = frozenset(),
             into: dict[str, str] | None = None) -> str:
    """The Python function that lays out operands, allocates outputs and launches one kernel.

    NOTE: it runs on every forward, so it stays short: each Python step costs about a microsecond,
    as much as a small kernel's whole run. `alt`: operands that may come channels-last (conv_layout.py)."""
    alt = alt or {}
    if k.kind in ("reduce", "depthwise"):
        return _reduce_wrapper(k, graph, into)
    if k.kind == "pool":
        return _pool_wrapper(k, graph, alt)
    nodes = graph.by_name()
    ops = operands(k, graph)
    vec = vector_width(k, graph)
    into = {o: d for o, d in (into or {}).items() if o in k.outputs}
    params = ", ".join([f"a_{o.name}" for o in ops] + [f"a_{d}" for d in into.values()])
    aligned = [f"a_{o.name}" for o in ops if vec > 1 and vec_class(o, vec) in ("full", "contig")]
    align = {f"a_{o.name}": ITEMSIZE[o.dtype] * vec for o in ops}
    outs = [(o, nodes[o].dtype) for o in k.outputs]
    lines = [
        f"def _{k.name}({params}):",
        f'    """{k.name}: {len(k.nodes)} fused ops over {tuple(k.shape)}; see its CUDA source above."""',
        *(_pick_build(alt, nodes) if alt else []),
        *_prepare([o.name for o in ops if o.name not in alt], nodes),
    ]
    over = {o: a for o, a in reusable(k, graph, made, alt).items() if o not in into}
    into_alloc, after = _into_lines(into, [o for o, _ in outs])
    allocs = [into_alloc.pop(0) if o in into else
              f"    out_{o} = a_{over[o]}  # NOTE: {over[o]} is read here alone, each element before it is written"
              if o in over else _allocate(o, k.shape, dt, [nodes[p.name] for p in ops]) for o, dt in outs]
    if any("device=dev" in a for a in allocs):
        lines.append(f"    dev = a_{ops[0].name}.device" if ops else "    dev = torch.device('cuda')")
    lines += allocs
    # NOTE: outputs come from the caching allocator, whose blocks are 512-byte aligned: only operands are tested.
    checks = [f"{a}.data_ptr() % {align[a]} == 0" for a in aligned]
    vec_arg = "0" if vec == 1 else f"int({' and '.join(checks)})" if checks else "1"
    ptrs = [f"a_{o.name}.data_ptr()" for o in ops] + [f"out_{o}.data_ptr()" for o, _ in outs]
    cl_vec = None
    if alt:
        cl_aligned = variant_aligned(k, graph, alt)
        cl_vec = "0" if cl_aligned is None else _aligned_test(cl_aligned)
    lines += _launch(k, ptrs, vec_arg, f"a_{ops[0].name}" if ops else "", cl_vec) + after
    ret = ", ".join(f"out_{o}" for o, _ in outs)
    lines.append(f"    return {ret}{',' if len(outs) == 1 else ''}")
    return "\n".join(lines)


def _lt_params(e: GemmSite, k: Kernel, names: _Names, elided: dict) -> list[str]:
    """The names `_lt_<kernel>` takes: the GEMM's matrices, the bias and the kernel's other operands, as
    forward names them."""
    made = e.views[-1] if e.views else e.gemm  # inside `_lt_<kernel>`
    return list(dict.fromkeys(names.expr(Ref(elided.get(a, a)))
                              for a in (e.mat1, e.mat2, e.bias, *k.inputs) if a != made))


def _lt_function(e: GemmSite, k: Kernel, graph: Graph, elided: dict) -> str:
    """`_lt_<kernel>(module, way, ...)`: the GEMM and kernel `k` one of `e.ways` (lt_epilogue.py); returns
    `k`'s outputs."""
    nodes, names = graph.by_name(), _Names(graph)
    expr = lambda a: names.expr(Ref(elided.get(a, a)))  # noqa: E731
    views = [_aten_line(nodes[v], names) for v in e.views]
    last = e.views[-1] if e.views else e.gemm
    kernel_args = [expr(a) for a in k.inputs]
    ops = ", ".join(nodes[m].op for m in k.nodes)
    gemm = nodes[e.gemm].target.split(".")[1]
    lines = [f"def _lt_{k.name}(module, way, {', '.join(_lt_params(e, k, names, elided))}):",
             f'    """{e.gemm} = {gemm} then {k.name} ({ops}), run as `way` says: {", ".join(e.ways)} (ours last)."""']
    if "epilogue" in e.ways:
        lines += ['    if way == "epilogue":  # bias and activation in cuBLASLt\'s ' + e.epilogue + " epilogue",
                  f"        {e.gemm} = {e.call(expr)}", *["        " + line for line in views], f"        return {last},"]
    if "addmm" in e.ways:
        zero = [f"_tw_zero(module, {k.name!r}, {expr(e.bias)})" if name == e.bias else arg
                for arg, name in zip(kernel_args, k.inputs)]
        lines += ['    if way == "addmm":  # the GEMM as eager runs a linear; the kernel adds -0.0, which changes nothing',
                  f"        {e.gemm} = {e.addmm_call(expr)}", *["        " + line for line in views],
                  f"        return _{k.name}({', '.join(zero)})"]
    lines += [f"    {_aten_line(nodes[e.gemm], names)}", *["    " + line for line in views],
              f"    return _{k.name}({', '.join(kernel_args)})"]
    return "\n".join(lines)


def _stride_spec(n: Node):
    """None for contiguous values, else the captured strides the kernel indexes with."""
    return None if is_contiguous(n) else tuple(n.stride)


def _header(plan: Plan, problem_name: str, layout_plan: bool, precision: str, cuda_graph: bool = False,
            blockers: list[str] = (), layouts: ConvLayouts = ConvLayouts()) -> str:
    graph = plan.graph
    nodes = graph.by_name()
    lib = [nodes[s] for s in plan.steps if s in nodes and nodes[s].op == "aten"]
    library = [n for n in lib if n.target in LIBRARY]
    metadata_only = set(VIEWS) | {"aten.t.default", "aten.transpose.int", "aten.permute.default",
                                  "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim"}
    other = [n for n in lib if n.target not in LIBRARY and n.target not in metadata_only]
    fused = sum(len(k.nodes) for k in plan.kernels)
    reduce = [k for k in plan.kernels if k.kind == "reduce"]
    pools = [k for k in plan.kernels if k.kind == "pool"]
    convs = [k for k in plan.kernels if k.kind == "depthwise"]
    n_reduce = sum(nodes[m].is_anchor for k in reduce for m in k.nodes)  # a row kernel may chain several
    anchored = ([f"{n_reduce} reductions/norms"] if reduce else []) + ([f"{len(pools)} pools"] if pools else []) + (
        [f"{len(convs)} depthwise convolution(s)"] if convs else [])
    what = f"{fused} ops ({' and '.join(anchored)} with their pointwise neighbours)" if anchored else (
        f"{fused} pointwise ops")
    lines = [f"torchweld: ModelNew for {problem_name}.", "",
             f"Fused: {what} into {len(plan.kernels)} CUDA kernel(s):"]
    for k in plan.kernels:
        ops = ", ".join(nodes[m].op for m in k.nodes)
        if k.kind == "reduce":
            lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} elements, "
                         f"{reduce_traffic(k, graph)})")
            continue
        if k.kind == "pool":
            out = nodes[k.anchor].shape
            lines.append(f"  {k.name}: {ops}  {tuple(k.shape)} -> {tuple(out)} (one thread per output, "
                         f"{prod(out):,} outputs)")
            continue
        if k.kind == "depthwise":
            taps = "x".join(map(str, nodes[nodes[k.anchor].args[1]].shape[2:]))
            lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} outputs of a {taps} "
                         "depthwise convolution; each input tile read once, the epilogue applied before the store)")
            continue
        lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} elements, one pass)")
    if library:
        lines.append("In libraries (cuDNN/cuBLAS through ATen: their main loops beat a hand-written one):")
        lines += [f"  {n.name} = {n.target}" for n in library]
    decisions = lt_decisions(plan)
    if decisions:
        lines.append("GEMM sites (`_tw_lt` times each way offered besides ours, the GEMM then its kernel, at the "
                     "first call on each device,")
        lines.append("and keeps the fastest where it is clearly faster than ours):")
        lines += [f"  {k}: {describe_decision(d)}" for k, d in decisions.items()]
    lines += fold_header(graph)
    packed = packed_weights(graph)
    if packed:
        lines.append("Packed weights (`_tw_pack`: cuBLAS runs the GEMM's NN form, faster than the TN form of a linear's")
        lines.append("W.t(); the copy is made once per version of the weight and costs its memory once more):")
        lines += [f"  {t} = {nodes[p].target}.t(), laid out (in, out)" for t, p in packed.items()]
    if other:
        lines.append("Still in PyTorch (not fused by this version; views, which move no data, not listed):")
        lines += [f"  {n.name} = {n.target}" for n in other]
    if precision == "tf32":
        lines += ["", "Precision: tf32 (asked for): cuBLAS (cuBLASLt too) and cuDNN may use TF32 matrix units for fp32 data;",
                  "fused kernels compute in fp32 (fp16/bf16 data too)."]
    else:
        lines += ["", "Precision: fp32 stays fp32 (fp16/bf16 data computes in fp32); no TF32 is enabled here."]
    if layout_plan:
        lines.append("Layout: each convolution runs in NCHW or channels-last, cuDNN's heuristic or benchmarked "
                     "algorithm, whichever was measured fastest at its first call (`_tw_conv`).")
        both = [k.name for k in plan.kernels if layouts.of(k)]
        if both:
            lines.append(f"A channels-last result is read as made (no copy back to NCHW) by {', '.join(both)}: "
                         "each has a second build, `_cl`, for it.")
    if cuda_graph:
        lines += ["CUDA graph (asked for): the fast path is captured at its first call and replayed: inputs are",
                  "copied into the captured buffers and the output is cloned (each call returns a new tensor).",
                  "Terms: parameters are read where they lived at capture (moving one, e.g. .to(), or changing",
                  "one in place, e.g. load_state_dict, captures again); no other stream may use the captured",
                  "buffers meanwhile."]
    elif blockers:
        lines.append("CUDA graph: asked for but not used: " + "; ".join(blockers) + ".")
    lines += ["Inputs of other shapes, dtypes or devices run the original forward (`_tw_general`)."]
    return '"""' + "\n".join(lines) + '\n"""'


_PLAIN = (int, float, bool, str, type(None))


def _plain(v) -> bool:
    """A value whose repr is itself: numbers, strings, None, and tuples/lists/dicts of them."""
    if isinstance(v, (tuple, list)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return isinstance(v, _PLAIN)


def _init_check(init: ast.FunctionDef | None, init_args) -> str:
    """`self._tw_same_init = repr((a, b, ...)) == '<captured>'` for Model.__init__'s arguments, or "".

    NOTE: forward's constants (a conv's stride, a threshold) come from the captured model; a ModelNew
    built with other arguments must not run the kernels, even on inputs of the captured shape."""
    if init is None or init_args is None:
        return ""
    a = init.args
    names = [x.arg for x in a.posonlyargs + a.args][1:]
    names += [a.vararg.arg] if a.vararg else []
    names += [x.arg for x in a.kwonlyargs] + ([a.kwarg.arg] if a.kwarg else [])
    if not names:
        return ""
    values = _bind_init(init, init_args)
    if values is None or not _plain(values):
        return ""
    return f"self._tw_same_init = repr(({', '.join(names)},)) == {repr(tuple(values))!r}"


def _bind_init(init: ast.FunctionDef, init_args) -> list | None:
    """The values __init__'s parameters take for `init_args`, in the order `_init_check` names them."""
    import inspect

    src = "def f" + ast.unparse(init).split("def __init__", 1)[1].split(":\n", 1)[0] + ": pass"
    scope: dict = {}
    try:
        exec(src, {"torch": torch, "nn": torch.nn}, scope)  # NOTE: only the signature; defaults may name torch
        bound = inspect.signature(scope["f"]).bind(None, *init_args)
    except Exception:
        return None
    bound.apply_defaults()
    return list(bound.arguments.values())[1:]


def emit(plan: Plan, source: str, problem_name: str, layout_plan: bool = True, precision: str = "fp32",
         cuda_graph: bool = False, init_args: list | None = None) -> str:
    """The ModelNew file for `plan`, keeping the problem's constructor and forward signature.

    `layout_plan`: each convolution runs in the layout and cuDNN mode measured fastest at its first call.
    `precision`: "fp32" keeps fp32 math wherever the reference has it; "tf32" lets cuBLAS and cuDNN
    use TF32 matrix units (faster, about 1e-3 relative error), and the header says so.
    `cuda_graph`: the fast path is captured once and replayed as a CUDA graph (one launch instead of
    one per kernel), where `graph_blockers` finds nothing against it; the header states its terms.
    `init_args`: the constructor arguments the graph was captured with (a ModelNew built with others
    runs the original forward)."""
    if precision not in PRECISIONS:
        raise EmitError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    keep, model, lines = _source_parts(source)
    methods = {f.name: f for f in model.body if isinstance(f, ast.FunctionDef)}
    if "forward" not in methods:
        raise EmitError("Model must define forward")
    fwd = methods["forward"]
    if fwd.args.vararg or fwd.args.kwarg:  # the guard names each input: *args would leave them unbound
        raise EmitError("forward takes *args or **kwargs: not supported")
    signature = ast.unparse(fwd.args)
    layout_plan = layout_plan and any(n.target == CONV for n in plan.graph.nodes)
    blockers = graph_blockers(plan.graph) if cuda_graph else []
    cuda_graph = cuda_graph and not blockers
    inputs = [n for n in plan.graph.nodes if n.op == "input"]
    layouts = conv_layouts(plan) if layout_plan else ConvLayouts()
    cuda = module_source(list(plan.kernels), plan.graph, layouts)
    out = [_header(plan, problem_name, layout_plan, precision, cuda_graph, blockers, layouts), "import ctypes", "import hashlib", "import inspect", "",
           "import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
    out += [s for s in keep if s.strip() and s.strip() not in out]
    n_ptrs = {k.name: len(k.inputs) + len(k.outputs) + (k.kind == "reduce" and reduce_launch(k, plan.graph).workspace > 0)
              for k in plan.kernels}
    n_ptrs.update({variant_name(k): n_ptrs[k.name] for k in plan.kernels if layouts.of(k)})
    out += ["", f'_CUDA_SRC = r"""\n{cuda}"""', f"_KERNEL_ARGS = {n_ptrs!r}", "", pasted("build"), ""]
    lt = lt_sites(plan)
    if layout_plan or lt:
        out += ["", pasted("timing"), ""]
    if layout_plan:
        out += ["", pasted("conv"), ""]
    if lt:
        out += ["", pasted("gemm_ways"), ""]
    if any(n.op == FOLD for n in plan.graph.nodes):
        out += ["", pasted("fold"), ""]
    if packed_weights(plan.graph):
        out += ["", pasted("pack"), ""]
    if precision == "tf32":
        out += ["", pasted("tf32"), ""]
    if cuda_graph:
        out += ["", pasted("graph"), ""]
    made = frozenset(o for k in plan.kernels for o in k.outputs)
    into = {o: dst for o, (_, dst) in copies_into(plan).items()}
    out += [_wrapper(k, plan.graph, layouts.of(k), made, into) + "\n\n" for k in plan.kernels]
    out += [_lt_function(e, plan.kernel(name), plan.graph, _elided_views(plan)) + "\n\n" for name, e in lt.items()]
    out.append("class ModelNew(nn.Module):")
    doc = ast.get_docstring(model)
    if doc:
        out.append(f'    """{doc}"""')
    same_init = _init_check(methods.get("__init__"), init_args)
    for name, f in methods.items():
        if name == "__init__" and same_init:
            text = _method_source(lines, f)
            body = next(l for l in text.splitlines()[1:] if l.strip() and not l.strip().startswith(("#", ")")))
            indent = body[:len(body) - len(body.lstrip())]
            out.append(text + "\n" + indent + "# NOTE: the kernels hold this configuration's constants; another takes the general path\n"
                       + indent + same_init + "\n")
        elif name != "forward":
            out.append(_method_source(lines, f) + "\n")
    out += _forward(plan, inputs, signature, layout_plan, precision == "tf32", cuda_graph, bool(same_init), layouts)
    out.append("")
    out.append("    # The original forward, for inputs the kernels were not built for.")
    out.append(_method_source(lines, fwd, "_tw_general"))
    return "\n".join(out) + "\n"


def emit_passthrough(source: str, problem_name: str, reason: str) -> str:
    """A ModelNew that runs the original forward: what we write when the compiler cannot help.

    Always correct, and slower than eager by no more than a method call; the header says why.
    """
    keep, model, lines = _source_parts(source)
    methods = {f.name: f for f in model.body if isinstance(f, ast.FunctionDef)}
    if "forward" not in methods:
        raise EmitError("Model must define forward")
    why = " ".join(reason.split())[:300].replace('"', "'").replace("\\", "/")
    out = ['"""torchweld: ModelNew for ' + problem_name + ".", "",
           "Nothing fused: the compiler could not handle this model, so forward is the original code.",
           f"Reason: {why}", '"""', "import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
    out += [s for s in keep if s.strip() and s.strip() not in out]
    out += ["", "", "class ModelNew(nn.Module):"]
    doc = ast.get_docstring(model)
    if doc:
        out.append(f'    """{doc}"""')
    out += [_method_source(lines, f) + "\n" for f in methods.values()]
    return "\n".join(out).rstrip() + "\n"
