"""Run an IR graph with PyTorch ops (any device): the reference semantics of the IR, for tests."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from torchweld.codegen.ops import py_lit, torch_expr
from torchweld.simplify.conv_fold import FOLD, fold_spec
from torchweld.ir import Graph, Ref
from torchweld.emit.runtime import pasted


def _resolve(target: str):
    fn = torch.ops if not target.startswith("torch.") else torch  # `torch.tensor`: a constant's literal
    for part in target.split(".")[target.startswith("torch."):]:
        fn = getattr(fn, part)
    return fn


def _fold_make():
    """The emitted file's own fold (runtime/fold.py), so tests check the code that runs."""
    scope = {"torch": torch}
    exec(pasted("fold"), scope)  # noqa: S102 (our own template)
    return scope["_tw_fold_make"]


def run_graph(graph: Graph, state: dict[str, torch.Tensor], inputs: list, device="cpu"):
    """Evaluate `graph` on real tensors: params by qualified name, inputs in forward order."""
    env: dict[str, object] = {}
    ordered_inputs = iter(inputs)

    def value(a):
        if isinstance(a, Ref):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        if isinstance(a, torch.device):
            return torch.device(device)
        return a

    for n in graph.nodes:
        if n.op == "input":
            env[n.name] = next(ordered_inputs)
        elif n.op == "param":
            env[n.name] = state[n.target]
        elif n.op == FOLD:
            spec, tensors = fold_spec(n)
            env[n.name] = _fold_make()(spec, [env[t] for t in tensors])
        elif n.op == "getitem":
            env[n.name] = env[n.args[0]][n.args[1]]
        elif n.op == "aten":
            env[n.name] = _resolve(n.target)(*value(n.args), **{k: value(v) for k, v in n.attrs})
        else:
            args = [str(a) if isinstance(a, Ref) else py_lit(a) for a in n.args]
            scope = {"torch": torch, "F": F, **{str(a): env[a] for a in n.args if isinstance(a, Ref)}}
            env[n.name] = eval(torch_expr(n, args), scope)  # noqa: S307 (our own generated expression)
    outs = [env[o] for o in graph.outputs]
    return outs[0] if graph.single_output else tuple(outs)
