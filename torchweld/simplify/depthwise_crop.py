"""Slices of a depthwise convolution's output fold into the convolution: its kernel computes only
the window that is kept. A causal conv1d is written `conv1d(x, padding=k-1)[..., :L]`: it becomes
one convolution of output length L (its epilogue then fuses too, where the slice stood between).
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from torchweld.ir import Graph, Node

SLICE = "aten.slice.Tensor"


def _window(n: Node, conv: Node) -> tuple[int, int] | None:
    """(spatial dim, first index kept) of slice `n` of `conv`'s output, or None if it is not one
    contiguous run (step 1) along a spatial dim."""
    args = list(n.args) + [None] * (5 - len(n.args))
    _, dim, start, end, step = args[:5]
    nd = len(conv.shape)
    dim = dim % nd if isinstance(dim, int) else None
    if dim is None or dim < 2 or step not in (None, 1) or n.attrs:
        return None
    size = conv.shape[dim]
    start = 0 if start is None else start + size if start < 0 else start
    start = min(max(start, 0), size)
    others = [d for d in range(nd) if d != dim]
    if n.shape[dim] == 0 or [n.shape[d] for d in others] != [conv.shape[d] for d in others]:
        return None
    return dim - 2, start


def fold_depthwise_crop(graph: Graph) -> Graph:
    """Each slice that alone reads a depthwise convolution along a spatial dim becomes that convolution's window."""
    users = graph.users()
    out, log, dropped = [], [], set()
    current: dict[str, Node] = {}  # conv name -> its node as rewritten so far
    for n in graph.nodes:
        src = current.get(n.args[0]) if n.op == "aten" and n.target == SLICE and n.args else None
        if src is not None and users[src.name] == [n.name]:
            w = _window(n, src)
            if w is not None:
                d, start = w
                window = list(src.attr("window", (0,) * (len(src.shape) - 2)))
                window[d] += start
                attrs = tuple(sorted({**dict(src.attrs), "window": tuple(window)}.items()))
                strides = tuple(prod(n.shape[i + 1:]) for i in range(len(n.shape)))
                conv = replace(src, name=n.name, shape=n.shape, attrs=attrs, stride=strides)
                dropped.add(src.name)
                current[n.name] = conv
                out.append(conv)
                log.append(f"fold_depthwise_crop: {n.name} = {src.name} computed on its window {tuple(window)}")
                continue
        if n.op == "depthwise_conv":
            current[n.name] = n
        out.append(n)
    if not log:
        return graph
    return replace(graph, nodes=tuple(m for m in out if m.name not in dropped)).with_log(*log)
