"""Conv output layouts: which convolutions hand their readers the layout cuDNN made them in.

`_tw_conv` (runtime/conv_run.py) runs each 2-d or 3-d convolution in NCHW or channels-last,
whichever it measured fastest at its first call. A channels-last result converted back to the
captured layout costs a pass over the whole output (read and write). A site skips that pass where
every value made from its output (through views) is read only by fused kernels that also have a
build for the strides a channels-last convolution gives those values (`<kernel>_cl`: a pointwise
kernel tiled through shared memory, codegen/pointwise_cl.py, or a pool kernel with its threads in
the operands' memory order). Each such kernel's wrapper picks its build from its operands' strides at
every call, and lays out any other strides as captured (the general path).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from torchweld.ir import CONVOLUTION, Graph, Kernel, Node, Plan, map_refs
from torchweld.tiling import channels_last_tile, own_strides, pool_channels_last

FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}
# Views a convolution's output may pass through on its way to kernels: replayed on a meta tensor
# laid out channels-last, they give the strides the kernels then see (an op that would copy, as a
# reshape of channels-last data to (N, C*H*W) does, keeps the site converting).
VIEW_OPS = frozenset({
    "aten.slice.Tensor", "aten.select.int", "aten.narrow.default", "aten.view.default", "aten._unsafe_view.default",
    "aten.reshape.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
    "aten.squeeze.default", "aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.expand.default",
    "aten.alias.default", "aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default",
    "aten.unbind.int",
})


@dataclass(frozen=True)
class ConvLayouts:
    """The sites that hand on their output as made, and the strides their values then have."""

    keep: frozenset = frozenset()  # convolution nodes run with `to=None`
    channels_last: dict = field(default_factory=dict)  # value -> strides when its convolution ran channels-last (where they differ)

    def of(self, k: Kernel) -> dict[str, tuple]:
        """`k`'s operands that may come channels-last, with the strides they then have."""
        return {a: self.channels_last[a] for a in k.inputs if a in self.channels_last}


def moved(n: Node, stride: tuple) -> bool:
    """Whether `stride` lays `n` out differently from its captured strides (size-1 dims aside)."""
    return own_strides(tuple(n.shape), tuple(stride)) != own_strides(tuple(n.shape), tuple(n.stride))


def takes_channels_last(k: Kernel, graph: Graph, strides: dict[str, tuple]) -> bool:
    """Whether `k` has a build that reads the operands in `strides` at those strides without a copy.
    Reductions and norms have none: a site they read converts its output (one copy)."""
    if not strides:
        return True
    if k.kind == "pointwise":
        return channels_last_tile(k, graph, strides) is not None
    if k.kind == "pool":
        return pool_channels_last(k, graph, strides) is not None
    return False


def conv_layouts(plan: Plan) -> ConvLayouts:
    """The convolutions whose readers all take either layout (kernels with a channels-last build)."""
    graph = plan.graph
    nodes, users = graph.by_name(), graph.users()
    readers: dict[str, list[Kernel]] = {}
    for k in plan.kernels:
        for a in k.inputs:
            readers.setdefault(a, []).append(k)
    found = {}
    for n in graph.nodes:
        if n.op == "aten" and n.target == CONVOLUTION and len(n.shape) in FORMATS:
            follow = _follow(n, nodes, users, readers)
            if follow is not None:
                found[n.name] = follow
    keep = set(found)
    while True:
        strides = {v: s for site in keep for v, s in found[site][0].items() if moved(nodes[v], s)}
        bad = {site for site in keep for k in found[site][1]
               if not takes_channels_last(k, graph, {a: strides[a] for a in k.inputs if a in strides})}
        if not bad:
            return ConvLayouts(frozenset(keep), strides)
        keep -= bad


def _follow(conv: Node, nodes: dict, users: dict, readers: dict) -> tuple[dict, list[Kernel]] | None:
    """({value: strides} of the conv's output and the views of it, kernels reading them) where the
    output ran channels-last; None where a value reaches anything but a view or a kernel."""
    fmt = FORMATS[len(conv.shape)]
    values = {conv.name: torch.empty(tuple(conv.shape), dtype=getattr(torch, conv.dtype), device="meta",
                                     memory_format=fmt)}
    strides, kernels, stack = {}, [], [conv.name]
    while stack:
        v = stack.pop()
        if isinstance(values[v], torch.Tensor):
            strides[v] = tuple(values[v].stride())
        for u in dict.fromkeys(users[v]):
            reading = [k for k in readers.get(v, []) if u in k.nodes]
            if reading:
                kernels += [k for k in reading if k not in kernels]
                continue
            if u == "<output>" or u in values:
                return None
            made = _replay(nodes[u], v, values[v])
            if made is None:
                return None
            values[u] = made
            stack.append(u)
    return strides, kernels


def _replay(n: Node, src: str, value):
    """`n` applied to `value` (its only tensor argument) on the meta device, if it is a view."""
    if n.op == "getitem" and isinstance(value, (list, tuple)):
        return value[n.args[1]]
    if n.op != "aten" or n.target not in VIEW_OPS or n.inputs() != [src]:
        return None
    fn = torch.ops
    for part in n.target.split("."):
        fn = getattr(fn, part)
    try:
        out = fn(*map_refs(n.args, lambda _: value), **dict(n.attrs))
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    views = out if isinstance(out, (list, tuple)) else [out]
    return out if all(isinstance(t, torch.Tensor) and t._is_view() for t in views) else None
