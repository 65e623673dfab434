"""Python expressions for IR values and aten calls inside the emitted file."""
from __future__ import annotations

import math

import torch

from torchweld.codegen import py_lit
from torchweld.ir import Dim, Node, Ref


def expr(a, nodes: dict[str, Node]) -> str:
    """The Python expression for argument `a` (a node name or a constant) inside the emitted forward."""
    if isinstance(a, Ref):
        n = nodes[a]
        if n.op == "param":
            return n.name  # fetched once at the top of forward (`state_path`)
        if n.op == "input":
            return n.target
        return str(a)
    if isinstance(a, Dim):  # a runtime size: read from the input (plan/batch.py)
        return f"{expr(Ref(a.of), nodes)}.shape[{a.dim}]"
    if isinstance(a, (list, tuple)):
        inner = ", ".join(expr(x, nodes) for x in a)
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
# arguments against the schema in Python, microseconds more per call than the C++-bound function,
# as much as a small kernel's run. Each entry: (method or function, positional args it takes).
PYTHON_API = {
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
    "torch.tensor": ("torch.tensor", 1),  # a constant made inside forward (capture/constants.py)
    "aten.lstm.input": ("torch.lstm", 9), "aten.gru.input": ("torch.gru", 9),
    "aten.rnn_tanh.input": ("torch.rnn_tanh", 9), "aten.rnn_relu.input": ("torch.rnn_relu", 9),
}


def aten_call(n: Node, nodes: dict[str, Node]) -> str:
    """`n`'s aten call as Python: the C++-bound API where it is known, else torch.ops."""
    args = [expr(a, nodes) for a in n.args]
    kwargs = [f"{k}={expr(v, nodes)}" for k, v in n.attrs]
    api = PYTHON_API.get(n.target)
    if api is not None and len(args) <= api[1] and (api[0] != ".clone" or not kwargs):
        fn, _ = api
        if fn.startswith("."):
            return f"{args[0]}{fn}({', '.join(args[1:] + kwargs)})"
        return f"{fn}({', '.join(args + kwargs)})"
    return f"torch.ops.{n.target}({', '.join(args + kwargs)})"


def aten_line(n: Node, nodes: dict[str, Node]) -> str:
    """`name = call`: the line of forward that runs aten node `n`."""
    return f"{n.name} = {aten_call(n, nodes)}"


def module_path(dotted: str) -> str:
    """`self._modules['a']._modules['b']` for module path "a.b": dict lookups, where `self.a.b`
    runs nn.Module.__getattr__ in Python twice (a Python call each, on every forward)."""
    return "self" + "".join(f"._modules[{part!r}]" for part in dotted.split(".") if part)


def state_path(n: Node) -> str:
    """The expression that fetches parameter or buffer `n` from the module, fast."""
    owner, _, leaf = n.target.rpartition(".")
    if n.attr("plain"):  # a tensor held as a plain attribute (capture/state.py)
        return f"{module_path(owner)}.{leaf}"
    table = "_buffers" if n.attr("buffer") else "_parameters"
    return f"{module_path(owner)}.{table}[{leaf!r}]"


def state_attr(dotted: str) -> str:
    """The attribute an assignment to module state "a.b.hidden" sets: `self._modules['a']._modules['b'].hidden`."""
    owner, _, leaf = dotted.rpartition(".")
    return f"{module_path(owner)}.{leaf}"
