"""Build IR graphs from small modules, for the compiler's CPU tests."""
from __future__ import annotations

import torch
import torch.nn as nn

from torchweld.capture import capture
from torchweld.interp import run_graph
from torchweld.plan import plan
from torchweld.simplify import simplify


class Fn(nn.Module):
    """A module whose forward is a plain function of its inputs and optional parameters."""

    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            self.register_parameter(name, nn.Parameter(value))

    def forward(self, *xs):
        return self.fn(self, *xs)


def graphs(fn, *inputs, **params):
    """(captured, simplified) graphs of fn(self, *inputs)."""
    g = capture(Fn(fn, **params), list(inputs))
    return g, simplify(g)


def kernels(fn, *inputs, **params):
    """The kernel plan of fn(self, *inputs)."""
    return plan(graphs(fn, *inputs, **params)[1])


def run(graph, module_params: dict, inputs: list):
    return run_graph(graph, module_params, inputs)


ARITH = {"add", "sub", "mul", "div", "neg", "fma"}


def arithmetic_ops(graph) -> int:
    return sum(1 for n in graph.nodes if n.op in ARITH)


SPECIAL = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0e38, -3.0e38, 1e-40, float("inf"), float("-inf"), float("nan")])


def special_values(shape) -> torch.Tensor:
    """A tensor of `shape` with every special float value, then random values."""
    numel = 1
    for s in shape:
        numel *= s
    flat = torch.randn(numel) * 3
    k = min(numel, SPECIAL.numel())
    flat[:k] = SPECIAL[:k]
    return flat[torch.randperm(numel)].reshape(shape)
