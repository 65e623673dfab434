"""Convolution sites: the convolutions `_tw_conv` runs in the layout measured fastest at their first
call (runtime/conv_run.py), and the layout each hands its output on in."""
from __future__ import annotations

import torch

from torchweld.ir import CONVOLUTION, Node, Plan
from torchweld.plan.conv_layout import FORMATS, moved


def conv_sites(plan: Plan, layouts) -> dict[str, str | None]:
    """{convolution: the memory format its output is handed on in} in the order forward runs them:
    None where `layouts` (conv_layout.ConvLayouts) lets every reader take it as made."""
    nodes = plan.graph.by_name()
    out = {}
    for step in plan.steps:
        n = nodes.get(step) if plan.kernel(step) is None else None
        if n is not None and n.op == "aten" and n.target == CONVOLUTION:
            out[n.name] = None if n.name in layouts.keep else captured_format(n)
    return out


def captured_format(n: Node) -> str:
    """The memory format of `n` as captured: channels-last where the original made that, else contiguous."""
    fmt = FORMATS.get(len(n.shape))
    if fmt is not None and not moved(n, torch.empty(tuple(n.shape), device="meta", memory_format=fmt).stride()):
        return str(fmt).split(".")[-1]
    return "contiguous_format"
