"""A module's state as the trace sees it: parameters, buffers, and tensors held as plain attributes
(a hand-written RNN's `self.hidden = torch.randn(...)`), each a graph input; and the state forward
assigns anew (`self.hidden = torch.tanh(...)`), each an extra graph output that the emitted forward
writes back, as the original does.
"""
from __future__ import annotations

from dataclasses import replace

import torch
from torch.nn.utils.stateless import _reparametrize_module

from torchweld.ir import Graph

WRITES = "torchweld_writes"  # the GraphModule's meta key: the state names forward assigns, in output order
PLAIN = "torchweld_plain"  # and the state names that are plain attributes


def plain_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{dotted name: tensor} for tensors held as plain attributes (neither parameter nor buffer)."""
    out = {}
    for path, m in model.named_modules(remove_duplicate=False):
        registered = set(m._parameters) | set(m._buffers)
        for name, v in vars(m).items():
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter) and name not in registered:
                out[f"{path}.{name}" if path else name] = v
    return out


def state(model: torch.nn.Module) -> tuple[list[str], list]:
    """(names, values): parameters, buffers, then plain tensor attributes."""
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    plain = plain_tensors(model)
    return list(params) + list(buffers) + list(plain), list(params.values()) + list(buffers.values()) + list(plain.values())


def _get(model: torch.nn.Module, dotted: str):
    owner, _, leaf = dotted.rpartition(".")
    return getattr(model.get_submodule(owner) if owner else model, leaf, None)


def traced_call(model: torch.nn.Module, names: list[str], writes: list):
    """The function make_fx traces: state then inputs in, forward's outputs out, followed by the value
    of each state name forward assigned anew (their names put in `writes`)."""

    def fn(*args):
        given = dict(zip(names, args[: len(names)]))
        # NOTE: the context writes what forward assigned back into the dict it is given: it gets a copy
        with _reparametrize_module(model, dict(given), tie_weights=True):
            out = model(*args[len(names):])
            now = {k: _get(model, k) for k in names}
        changed = [k for k in names if isinstance(now[k], torch.Tensor) and now[k] is not given[k]]
        writes[:] = [(k, isinstance(out, (tuple, list))) for k in changed]
        if not changed:
            return out
        return (*(out if isinstance(out, (tuple, list)) else (out,)), *(now[k] for k in changed))

    return fn


def with_writes(graph: Graph, gm: torch.fx.GraphModule) -> Graph:
    """`graph` with its plain-attribute state marked, and its trailing outputs that are state written
    back recorded as `writes` (the outputs forward returns come first)."""
    plain, writes = gm.meta.get(PLAIN, ()), gm.meta.get(WRITES, ())
    if plain:
        graph = replace(graph, nodes=tuple(replace(n, attrs=n.attrs + (("plain", True),))
                                           if n.op == "param" and n.target in plain else n for n in graph.nodes))
    if not writes:
        return graph
    return replace(graph, writes=tuple(k for k, _ in writes), single_output=not writes[0][1])
