"""Emit: the standalone ModelNew file (needs PyTorch alone: no torchweld import at run time)."""
from __future__ import annotations

import ast
import math
from math import prod

import torch

from torchweld.codegen.kernel import ITEMSIZE, is_contiguous, module_source, operands, vec_class, vector_width
from torchweld.codegen.ops import py_lit, torch_expr
from torchweld.codegen.reduce import reduce_launch, reduce_traffic
from torchweld.ir import LIBRARY, Graph, Node, Ref, flat_args, format_node
from torchweld.epilogue import VIEWS
from torchweld.plan import Kernel, Plan
from torchweld.runtime_template import RUNTIME


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
                return f"self.{n.target}"
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


def _aten_line(n: Node, names: _Names) -> str:
    args = [names.expr(a) for a in n.args] + [f"{k}={names.expr(v)}" for k, v in n.attrs]
    return f"{n.name} = torch.ops.{n.target}({', '.join(args)})"


def _forward(plan: Plan, inputs: list[Node], signature: str) -> list[str]:
    graph = plan.graph
    names = _Names(graph)
    nodes = graph.by_name()
    tensors = [n for n in inputs if n.attr("value") is None]
    guard = " or ".join(
        [f"{n.target}.shape != {tuple(n.shape)!r} or {n.target}.dtype != torch.{n.dtype} or not {n.target}.is_cuda"
         for n in tensors] + [f"{n.target} != {n.attr('value')!r}" for n in inputs if n not in tensors]) or "False"
    if tensors:  # NOTE: kernels launch on the current device, so the inputs must live there
        guard += f" or {tensors[0].target}.get_device() != torch.cuda.current_device()"
    arg_names = ", ".join(n.target for n in inputs)
    modes = _norm_modes(graph)
    if modes:
        guard = " or ".join([guard] + [f"{m}.training is not {t}" for m, t in modes])
    body = [f"    def forward({signature}):",
            "        # NOTE: kernels are specialised to the captured shapes; other inputs take the general path.",
            f"        if {guard}:",
            f"            return self._tw_general({arg_names})"]
    if any(isinstance(a, torch.device) for n in graph.nodes for a in flat_args(n.args + tuple(v for _, v in n.attrs))):
        body.append(f"        _dev = {tensors[0].target}.device" if tensors else "        _dev = torch.device('cuda')")
    for step in plan.steps:
        k = plan.kernel(step)
        if k is not None:
            outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
            args = ", ".join(names.expr(Ref(a)) for a in k.inputs)
            ops = "; ".join(format_node(nodes[m]).split("  #")[0] for m in k.nodes)
            body.append(f"        {outs} = _{k.name}({args})  # {ops}")
            continue
        n = nodes[step]
        if n.op in ("input", "param"):
            continue
        if n.op == "getitem":
            body.append(f"        {n.name} = {names.expr(n.args[0])}[{n.args[1]!r}]")
        elif n.op == "aten":
            note = "  # library" if n.target in LIBRARY else ""
            body.append(f"        {_aten_line(n, names)}{note}")
        else:
            args = [names.expr(a) for a in n.args]
            body.append(f"        {n.name} = {torch_expr(n, args)}")
    outs = [names.expr(Ref(o)) for o in graph.outputs]
    body.append(f"        return {outs[0] if graph.single_output else '(' + ', '.join(outs) + ',)'}")
    return body


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
        out.append(("self" + (f".{path}" if path else ""), training))
    return out


def _prepare(kernel: str, names: list[str], nodes: dict) -> list[str]:
    """Checks for a kernel's operands: parameters and forward inputs fully (the user may change them),
    values made inside forward only for layout (their device, dtype and shape follow from the guard)."""
    def leaf(n: Node) -> bool:  # a parameter seen through a view (a folded bias) is checked like one
        source = nodes.get(n.args[0]) if n.op == "aten" and n.args and isinstance(n.args[0], Ref) else None
        return n.op in ("param", "input") or (n.target in VIEWS and source is not None and source.op == "param")

    leaves = [a for a in names if leaf(nodes[a])]
    lines = []
    if leaves:
        specs = ", ".join(f"(torch.{nodes[a].dtype}, {tuple(nodes[a].shape)!r}, {_stride_spec(nodes[a])!r})"
                          for a in leaves)
        args = ", ".join(f"a_{a}" for a in leaves) + ("," if len(leaves) == 1 else "")
        lines.append(f"    ({args}) = _tw_check({kernel!r}, ({args}), ({specs}{',' if len(leaves) == 1 else ''}))")
    for a in names:
        if a not in leaves:
            lines.append(f"    a_{a} = _tw_layout(a_{a}, {tuple(nodes[a].shape)!r}, {_stride_spec(nodes[a])!r})")
    return lines


def _reduce_wrapper(k: Kernel, graph: Graph) -> str:
    """Like `_wrapper`, for a reduce kernel: outputs take their own shapes; no vector build."""
    nodes = graph.by_name()
    params = ", ".join(f"a_{a}" for a in k.inputs)
    anchor = nodes[k.anchor]
    lines = [
        f"def _{k.name}({params}):",
        f'    """{k.name}: {anchor.op} with {len(k.nodes) - 1} fused pointwise ops; see its CUDA source above."""',
        *_prepare(k.name, list(k.inputs), nodes),
        f"    dev = a_{k.inputs[0]}.device",
    ]
    if anchor.op == "batch_norm":  # NOTE: the kernel updates the running statistics in place
        lines.append(f"    assert a_{anchor.args[3]}.is_contiguous() and a_{anchor.args[4]}.is_contiguous()")
    for o in k.outputs:
        lines.append(f"    out_{o} = torch.empty({tuple(nodes[o].shape)!r}, dtype=torch.{nodes[o].dtype}, device=dev)")
    ptrs = [f"a_{a}.data_ptr()" for a in k.inputs] + [f"out_{o}.data_ptr()" for o in k.outputs]
    launch = reduce_launch(k, graph)
    if launch.workspace:  # NOTE: per call, so that calls on two streams never share partial results
        lines.append(f"    ws = torch.empty({launch.workspace}, dtype=torch.float32, device=dev)")
        ptrs.append("ws.data_ptr()")
    vec = "0"
    if launch.vec > 1:
        vec = "int(" + " and ".join(
            f"{'out_' if n in k.outputs else 'a_'}{n}.data_ptr() % {b} == 0" for n, b in launch.aligned) + ")"
        vec = vec if launch.aligned else "1"
    lines.append(f"    _tw_launch({k.name!r}, _LIB.tw_launch_{k.name}({', '.join(ptrs)}, {vec}, _tw_stream(dev)))")
    outs = ", ".join(f"out_{o}" for o in k.outputs)
    lines.append(f"    return {outs}{',' if len(k.outputs) == 1 else ''}")
    return "\n".join(lines)


def _wrapper(k: Kernel, graph: Graph) -> str:
    """The Python function that checks inputs, allocates outputs and launches one kernel."""
    if k.kind == "reduce":
        return _reduce_wrapper(k, graph)
    nodes = graph.by_name()
    ops = operands(k, graph)
    vec = vector_width(k, graph)
    params = ", ".join(f"a_{o.name}" for o in ops)
    aligned = [f"a_{o.name}" for o in ops if vec > 1 and vec_class(o, vec) in ("full", "contig")]
    align = {f"a_{o.name}": ITEMSIZE[o.dtype] * vec for o in ops}
    outs = [(o, nodes[o].dtype) for o in k.outputs]
    lines = [
        f"def _{k.name}({params}):",
        f'    """{k.name}: {len(k.nodes)} fused ops over {tuple(k.shape)}; see its CUDA source above."""',
        *_prepare(k.name, [o.name for o in ops], nodes),
        f"    dev = a_{ops[0].name}.device" if ops else "    dev = torch.device('cuda')",
    ]
    for o, dt in outs:
        lines.append(f"    out_{o} = torch.empty({tuple(k.shape)!r}, dtype=torch.{dt}, device=dev)")
    if vec > 1:
        checks = [f"{a}.data_ptr() % {align[a]} == 0" for a in aligned]
        checks += [f"out_{o}.data_ptr() % {ITEMSIZE[dt] * vec} == 0" for o, dt in outs]
        lines.append(f"    vec = int({' and '.join(checks) or 'True'})")
    else:
        lines.append("    vec = 0")
    ptrs = [f"a_{o.name}.data_ptr()" for o in ops] + [f"out_{o}.data_ptr()" for o, _ in outs]
    lines.append(f"    _tw_launch({k.name!r}, _LIB.tw_launch_{k.name}({', '.join(ptrs)}, vec, _tw_stream(dev)))")
    ret = ", ".join(f"out_{o}" for o, _ in outs)
    lines.append(f"    return {ret}{',' if len(outs) == 1 else ''}")
    return "\n".join(lines)


def _stride_spec(n: Node):
    """None for contiguous values, else the captured strides the kernel indexes with."""
    return None if is_contiguous(n) else tuple(n.stride)


def _header(plan: Plan, problem_name: str) -> str:
    graph = plan.graph
    nodes = graph.by_name()
    lib = [nodes[s] for s in plan.steps if s in nodes and nodes[s].op == "aten"]
    library = [n for n in lib if n.target in LIBRARY]
    metadata_only = set(VIEWS) | {"aten.t.default", "aten.transpose.int", "aten.permute.default",
                                  "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim"}
    other = [n for n in lib if n.target not in LIBRARY and n.target not in metadata_only]
    fused = sum(len(k.nodes) for k in plan.kernels)
    reduce = [k for k in plan.kernels if k.kind == "reduce"]
    what = f"{fused} ops ({len(reduce)} reductions/norms with their pointwise neighbours)" if reduce else (
        f"{fused} pointwise ops")
    lines = [f"torchweld: ModelNew for {problem_name}.", "",
             f"Fused: {what} into {len(plan.kernels)} CUDA kernel(s):"]
    for k in plan.kernels:
        ops = ", ".join(nodes[m].op for m in k.nodes)
        if k.kind == "reduce":
            lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} elements, "
                         f"{reduce_traffic(k, graph)})")
            continue
        lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} elements, one pass)")
    if library:
        lines.append("In libraries (cuDNN/cuBLAS through ATen: their main loops beat a hand-written one):")
        lines += [f"  {n.name} = {n.target}" for n in library]
    if other:
        lines.append("Still in PyTorch (not fused by this version; views, which move no data, not listed):")
        lines += [f"  {n.name} = {n.target}" for n in other]
    lines += ["", "Precision: fp32 stays fp32 (fp16/bf16 data computes in fp32); no TF32 is enabled here.",
              "Inputs of other shapes, dtypes or devices run the original forward (`_tw_general`)."]
    return '"""' + "\n".join(lines) + '\n"""'


def emit(plan: Plan, source: str, problem_name: str) -> str:
    """The ModelNew file for `plan`, keeping the problem's constructor and forward signature."""
    keep, model, lines = _source_parts(source)
    methods = {f.name: f for f in model.body if isinstance(f, ast.FunctionDef)}
    if "forward" not in methods:
        raise EmitError("Model must define forward")
    fwd = methods["forward"]
    if fwd.args.vararg or fwd.args.kwarg:  # the guard names each input: *args would leave them unbound
        raise EmitError("forward takes *args or **kwargs: not supported")
    signature = ast.unparse(fwd.args)
    inputs = [n for n in plan.graph.nodes if n.op == "input"]
    cuda = module_source(list(plan.kernels), plan.graph)
    out = [_header(plan, problem_name), "import ctypes", "import hashlib", "import inspect", "",
           "import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
    out += [s for s in keep if s.strip() and s.strip() not in out]
    n_ptrs = {k.name: len(k.inputs) + len(k.outputs) + (k.kind == "reduce" and reduce_launch(k, plan.graph).workspace > 0)
              for k in plan.kernels}
    out += ["", f'_CUDA_SRC = r"""\n{cuda}"""', f"_KERNEL_ARGS = {n_ptrs!r}", "", RUNTIME.strip(), ""]
    out += [_wrapper(k, plan.graph) + "\n\n" for k in plan.kernels]
    out.append("class ModelNew(nn.Module):")
    doc = ast.get_docstring(model)
    if doc:
        out.append(f'    """{doc}"""')
    for name, f in methods.items():
        if name != "forward":
            out.append(_method_source(lines, f) + "\n")
    out += _forward(plan, inputs, signature)
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
