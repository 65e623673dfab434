"""Capture: nn.Module + example inputs -> aten graph (fake tensors, nothing heavy runs) -> IR."""
from __future__ import annotations

import inspect
import operator
import re
import traceback
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functionalize

from torchweld.capture.cat import concat_nodes
from torchweld.capture.constants import ConstantError, constant_node
from torchweld.capture.conv import depthwise_nodes
from torchweld.capture.meta import dtype_name, to_ir_arg, val
from torchweld.capture.norm import anchor_nodes
from torchweld.capture.pointwise_ops import pointwise_node
from torchweld.capture.pooling import pool_nodes, spatial_reduction_as_pool
from torchweld.capture.recurrent import as_library, one_op_recurrences
from torchweld.capture.state import PLAIN, WRITES, plain_tensors, traced_call, with_writes
from torchweld.capture.state import state as module_state
from torchweld.ir import VIEWS, Graph, Node, Ref


class CaptureError(Exception):
    """The model could not be traced to an aten graph."""


# Ops with no effect on values in a functional graph: replaced by their input.
NOOPS = {"clone", "detach", "alias", "lift_fresh", "lift_fresh_copy", "contiguous"}


def _origin(node: torch.fx.Node, filename: str | None) -> str:
    """The source line of `forward` this node came from, if the trace recorded it."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\w+)\n\s*(.*)', trace)
    mine = [f for f in frames if filename and f[0] == filename] or [f for f in frames if f[2] == "forward"]
    if not mine:
        return ""
    path, line, fn, text = mine[-1]
    return f"line {line}: {text.strip()}"


def _decompositions() -> dict:
    """Composite ops traced as their parts, so the parts fuse: glu(x) -> x[:h] * sigmoid(x[h:])
    (two views of the library op's output, read in place by one kernel); the pointwise losses
    (Huber, smooth L1, MSE) -> their pointwise chain and its mean or sum, one reduce kernel."""
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    return get_decompositions([aten.glu, aten.huber_loss, aten.smooth_l1_loss, aten.mse_loss])


def trace_aten(model: torch.nn.Module, inputs: list,
               filename: str | None = None) -> tuple[torch.fx.GraphModule, list[str], list[str]]:
    """make_fx over a functional call, so parameters and buffers become graph inputs."""
    state_names, state_vals = module_state(model)  # parameters, buffers, plain tensor attributes
    arg_names = _forward_arg_names(model, len(inputs))
    writes: list = []
    fn = traced_call(model, state_names, writes)  # NOTE: returns the state forward assigns, after its outputs

    kwargs = {"tracing_mode": "fake", "decomposition_table": _decompositions()}
    if "record_stack_traces" in inspect.signature(make_fx).parameters:
        kwargs["record_stack_traces"] = True
    try:
        with torch.no_grad(), one_op_recurrences():
            gm = make_fx(functionalize(fn), **kwargs)(*state_vals, *inputs)
    except Exception as e:
        if type(e).__name__ in DATA_DEPENDENT:
            raise CaptureError(_data_dependent(e, {filename, _source_file(model)})) from None
        first = str(e).splitlines()[0] if str(e) else ""
        raise CaptureError(f"tracing forward failed: {type(e).__name__}: {first}") from e
    gm.meta.update({WRITES: tuple(writes), PLAIN: tuple(plain_tensors(model))})
    return gm, state_names, arg_names


# What the fake trace raises where forward needs a tensor's values: to branch (`if x.sum() > 0:`),
# as a number (`int(x.max())`), or for an output's shape (`x[x > 0]`, `nonzero`).
DATA_DEPENDENT = frozenset({"GuardOnDataDependentSymNode", "DataDependentOutputException",
                            "DynamicOutputShapeException"})


def _source_file(model) -> str | None:
    try:
        return inspect.getsourcefile(type(model))
    except (TypeError, OSError):
        return None


def _data_dependent(e: Exception, files: set) -> str:
    """One line naming the statement of the user's forward that needs a tensor's values."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename in files]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} (`{(frames[-1].line or '').strip()}`)" \
        if frames else ""
    return (f"forward depends on a tensor's values{where}: control flow or shapes that follow data "
            f"cannot be traced once and compiled ({type(e).__name__})")


def _forward_arg_names(model, n: int) -> list[str]:
    try:
        params = list(inspect.signature(model.forward).parameters.values())
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    return (names + [f"input{i}" for i in range(len(names), n)])[:n]


def capture(model: torch.nn.Module, inputs: list, filename: str | None = None) -> Graph:
    """Trace `model(*inputs)` with fake tensors and convert the aten graph to the IR."""
    gm, state_names, arg_names = trace_aten(model, inputs, filename)
    buffers = frozenset(name for name, _ in model.named_buffers(remove_duplicate=False))
    return with_writes(from_fx(gm, state_names, arg_names, filename, inputs, buffers), gm)


def from_fx(gm: torch.fx.GraphModule, state_names, arg_names, filename=None, inputs=None,
            buffers: frozenset = frozenset()) -> Graph:
    """`buffers`: the state names that are buffers (their param nodes get the attr buffer=True)."""
    names: dict[torch.fx.Node, str] = {}
    nodes: list[Node] = []
    placeholders = 0
    outputs, single = (), True
    tuples: set[torch.fx.Node] = set()  # norms converted to one IR node: getitem 0 is that node
    made_shape: dict[str, tuple] = {}  # anchors' shapes (instance norm: not its traced view's)
    items: dict[tuple, str] = {}  # (tuple-valued fx node, index) -> IR node, for anchors of two results
    dropped: set[torch.fx.Node] = set()  # a pool's unused indices, and what reads only them
    pools: set[torch.fx.Node] = set()  # fx nodes converted to pools
    aliases: dict[torch.fx.Node, str] = {}  # the squeezes after a 1-d pool: that pool's value
    scalars: dict[str, object] = {}  # 0-d constants made inside forward (torch.tensor(2)): their numbers

    def shape_dtype(n):
        v = val(n)
        if isinstance(v, torch.Tensor):
            if not all(isinstance(s, int) or s.node.has_hint() for s in v.shape):
                line, _, text = _origin(n, filename).removeprefix("line ").partition(": ")
                where = f" at {Path(filename or '').name}:{line} (`{text}`)" if line else ""
                raise CaptureError(f"a shape in forward depends on a tensor's values{where}: "
                                   f"kernels are built for fixed shapes")
            return tuple(int(s) for s in v.shape), dtype_name(v.dtype)
        return (), "tuple" if isinstance(v, (tuple, list)) else type(v).__name__

    def stride(n):
        v = val(n)
        return tuple(int(s) for s in v.stride()) if isinstance(v, torch.Tensor) else ()

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            i = placeholders
            placeholders += 1
            shape, dtype = shape_dtype(n)
            if i < len(state_names):
                node = Node(f"p{i}", "param", (), shape, dtype, target=state_names[i], stride=stride(n),
                            attrs=(("buffer", True),) if state_names[i] in buffers else ())
            else:
                k = i - len(state_names)
                node = Node(f"x{k}", "input", (), shape, dtype, target=arg_names[k], stride=stride(n))
                value = inputs[k] if inputs is not None and k < len(inputs) else None
                if isinstance(value, (bool, int, float)):  # NOTE: traced as a constant: the guard checks it
                    node = replace(node, dtype=type(value).__name__, attrs=(("value", value),))
            names[n] = node.name
            nodes.append(node)
            continue
        if n.op == "output":
            out = n.args[0]
            single = not isinstance(out, (list, tuple))
            outs = [out] if single else list(out)
            if not all(isinstance(o, torch.fx.Node) for o in outs):
                raise CaptureError("forward must return a tensor or a flat tuple of tensors")
            outputs = tuple(names[o] for o in outs)
            continue
        if n.op == "get_attr":  # a tensor made inside forward from Python data
            try:
                node = constant_node(f"v{len(nodes)}", getattr(gm, n.target), _origin(n, filename))
            except ConstantError as e:
                raise CaptureError(str(e)) from None
            names[n] = node.name
            nodes.append(node)
            if node.target == "aten.full.default" and not node.shape:
                scalars[node.name] = node.args[1]
            continue
        if n.op != "call_function":
            raise CaptureError(f"unsupported graph node {n.op} {n.target}")
        shape, dtype = shape_dtype(n)
        name = f"v{len(nodes)}"
        origin = _origin(n, filename)
        if n in aliases:
            names[n] = aliases[n]
            continue
        if any(a in dropped for a in n.all_input_nodes):  # NOTE: only unused values are dropped
            dropped.add(n)
            continue
        if n.target is operator.getitem and n.args[0] in tuples:
            if (n.args[0], n.args[1]) in items:  # var_mean's mean, max's values or indices
                names[n] = items[(n.args[0], n.args[1])]
            elif n.args[1] == 0:  # a converted norm's or pool's output; its statistics or indices are unused
                names[n] = names[n.args[0]]
            elif n.args[0] in pools:  # a max pool's indices (pooling.py checked that nothing uses them)
                dropped.add(n)
            continue
        if n.target is operator.getitem:
            node = Node(name, "getitem", (Ref(names[n.args[0]]), n.args[1]), shape, dtype, origin=origin)
        else:
            packet = n.target.__name__.split(".")[0] if hasattr(n.target, "__name__") else str(n.target)
            if packet in NOOPS and isinstance(n.args[0], torch.fx.Node) and shape_dtype(n.args[0]) == (shape, dtype):
                names[n] = names[n.args[0]]
                continue
            if packet in ("view", "_unsafe_view", "reshape") and isinstance(n.args[0], torch.fx.Node) \
                    and n.args[0] in names and made_shape.get(names[n.args[0]]) == shape:
                names[n] = names[n.args[0]]  # a view back to what the IR node already is (instance norm)
                continue
            if _restride_noop(n, nodes, names):
                names[n] = names[n.args[0]]
                continue
            node = pointwise_node(_numbers_for_constants(n, names, scalars), packet, name, shape, dtype, names, origin)
            made = None if node is not None else anchor_nodes(n, packet, name, names, origin)
            if made is not None and len(made) == 1:
                made = [spatial_reduction_as_pool(made[0], n.args[0])]
            if node is None and made is None:
                made = depthwise_nodes(n, name, names, origin)
            if node is None and made is None:
                made = concat_nodes(n, name, names, origin)
            if node is None and made is None:
                pooled = pool_nodes(n, name, names, origin)
                if pooled is not None:
                    made = pooled[0]
                    pools.add(n)
                    aliases.update((a, made[-1].name) for a in pooled[1])
            if made is not None:
                for m in made[:-1]:
                    nodes.append(m)
                items.update({(n, m.attr("item")): m.name for m in made if m.attr("item") is not None})
                node = made[-1]
                made_shape[node.name] = node.shape
                names[n] = node.name
                nodes.append(node)
                if isinstance(val(n), (tuple, list)):
                    tuples.add(n)
                continue
            node = node or Node(
                name, "aten", to_ir_arg(tuple(n.args), names), shape, dtype, target=_view_target(n),
                attrs=tuple(sorted((k, to_ir_arg(v, names)) for k, v in n.kwargs.items())), origin=origin)
        names[n] = name
        nodes.append(replace(node, stride=stride(n)))
    return device_neutral(as_library(Graph(tuple(nodes), outputs, single)))


def _view_target(n: torch.fx.Node) -> str:
    """`n`'s aten target; a view of a copy that capture drops (the clone a reshape traces as) becomes a
    reshape where the tensor copied has strides no view can take (it then copies, as the clone did)."""
    target = str(n.target)
    if target not in ("aten.view.default", "aten._unsafe_view.default"):
        return target
    src = n.args[0]
    while isinstance(src, torch.fx.Node) and src.op == "call_function" and src.args and \
            getattr(src.target, "__name__", "").split(".")[0] in NOOPS and isinstance(src.args[0], torch.fx.Node):
        src = src.args[0]
    v = val(src)
    if src is n.args[0] or not isinstance(v, torch.Tensor):
        return target
    try:
        torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta").view(list(n.args[1]))
    except RuntimeError:
        return "aten.reshape.default"
    return target


def _numbers_for_constants(n: torch.fx.Node, names: dict, scalars: dict):
    """`n`, or a stand-in whose 0-d constants are numbers, where another operand has dims (a 0-d
    tensor then promotes as a number does: `x * torch.tensor(2)` is `x * 2` for a float x)."""
    args = list(n.args)
    dims = any(isinstance(a, torch.fx.Node) and isinstance(val(a), torch.Tensor) and val(a).dim() for a in args)
    swap = [i for i, a in enumerate(args) if isinstance(a, torch.fx.Node) and names.get(a) in scalars]
    if not dims or not swap:
        return n
    for i in swap:
        args[i] = scalars[names[args[i]]]
    return SimpleNamespace(args=tuple(args), kwargs=n.kwargs)


def _restride_noop(n: torch.fx.Node, nodes: list[Node], names: dict) -> bool:
    """`as_strided_(v, v.shape, strides)` that moves no element: every dim longer than 1 keeps its
    stride (ATen's channels-last fix-up of a global pool's (N, C, 1, 1) result)."""
    # NOTE: a storage offset given would move the view; without one it stays where it is
    if str(n.target) != "aten.as_strided_.default" or len(n.args) != 3 or n.kwargs or \
            not isinstance(n.args[0], torch.fx.Node):
        return False
    src = next((m for m in reversed(nodes) if m.name == names.get(n.args[0])), None)
    if src is None or tuple(n.args[1]) != tuple(src.shape) or len(src.stride) != len(src.shape):
        return False
    return all(size == 1 or int(a) == b for size, a, b in zip(src.shape, n.args[2], src.stride))


# Ops the CPU trace picks that would not run on a GPU (the emitted file runs on CUDA).
_CPU_ONLY = ("_for_cpu", "mkldnn", "fbgemm", "onednn", "_cpu.", "_cpu_")
_SDPA_CPU = "aten._scaled_dot_product_flash_attention_for_cpu.default"


def device_neutral(graph: Graph) -> Graph:
    """Undo the CPU trace's device choices: CPU attention back to the SDPA op (which picks its own
    CUDA backend at run time); any other CPU-only op is an error, so the model gets a passthrough file."""
    nodes, users = graph.by_name(), graph.users()
    out, alias, dropped = [], {}, set()
    for n in graph.nodes:
        if n.op == "aten" and n.target == _SDPA_CPU:
            readers = [nodes[u] for u in users[n.name] if u != "<output>"]
            stats = [r for r in readers if r.op == "getitem" and r.args[1] != 0]
            if any(users[r.name] for r in stats) or any(r.op != "getitem" for r in readers) \
                    or "<output>" in users[n.name]:
                raise CaptureError("attention's saved statistics are used: not supported")
            dropped.update(r.name for r in stats)
            readers = [r for r in readers if r not in stats]
            q, k, v = n.args[:3]
            dropout = n.args[3] if len(n.args) > 3 else 0.0
            causal = n.args[4] if len(n.args) > 4 else False
            kw = dict(n.attrs)
            name = readers[0].name if readers else n.name
            for r in readers[1:]:
                alias[r.name] = name
            out.append(Node(name, "aten", (q, k, v, kw.get("attn_mask"), dropout, causal),
                            readers[0].shape if readers else (), readers[0].dtype if readers else n.dtype,
                            target="aten.scaled_dot_product_attention.default",
                            attrs=(("scale", kw.get("scale")),), origin=n.origin,
                            stride=_cuda_attention_stride(readers[0].shape) if readers else ()))
            alias.update({r.name: name for r in readers})
            continue
        if n.op == "aten" and any(tag in n.target for tag in _CPU_ONLY):
            raise CaptureError(f"{n.target} is a CPU-only op (the trace ran on the CPU)")
        if n.name in alias or n.name in dropped:
            continue
        out.append(replace(n, args=_rename(n.args, alias)) if alias else n)
    outputs = tuple(alias.get(o, o) for o in graph.outputs)
    return replace(graph, nodes=tuple(out), outputs=outputs)


def _cuda_attention_stride(shape: tuple) -> tuple:
    """The strides CUDA attention returns: its kernels write [B, S, H, D] and hand back the
    [B, H, S, D] transpose (the CPU trace's strides differ, and a kernel built for those would
    make every call copy the output first)."""
    if len(shape) != 4:
        return ()
    b, h, s, d = shape
    return (s * h * d, d, h * d, 1)


def _rename(args, alias):
    return tuple(Ref(alias.get(a, a)) if isinstance(a, Ref) else
                 type(a)(_rename(a, alias)) if isinstance(a, (list, tuple)) else a for a in args)
