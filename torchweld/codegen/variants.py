"""Second builds of a kernel, `<kernel>_cl`, for operands that come from a convolution run
channels-last (conv_layout.py says which and with what strides): the kernel's wrapper launches it
when the operands' strides are those, and writes the same outputs in the same (captured) layout.

- pointwise: tiled through shared memory (codegen/tiled.py): channel-fastest loads, NCHW stores.
- pool: the same pool kernel with the operands' strides and its threads in channels-last order
  (loads along C coalesced; each output stored at its captured offset).
Reductions and norms have no such build: a site they read converts its output (one copy).
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.codegen.pool import dense_strides, memory_order, out_strides, pool_source
from torchweld.codegen.tiled import aligned as tiled_aligned
from torchweld.codegen.tiled import tiled_source, tiling
from torchweld.ir import Graph
from torchweld.ir import Kernel


def supported(k: Kernel, graph: Graph, alt: dict[str, tuple]) -> bool:
    """Whether `k` can take the operands in `alt` at those strides without a copy."""
    if not alt:
        return True
    if k.kind == "pointwise":
        return tiling(k, graph, alt) is not None
    if k.kind == "pool":
        return _pool_graph(k, graph, alt) is not None
    return False


def variant_name(k: Kernel) -> str:
    return f"{k.name}_cl"


def variant_source(k: Kernel, graph: Graph, alt: dict[str, tuple]) -> str:
    """The CUDA source of `<kernel>_cl` and its launcher `tw_launch_<kernel>_cl`."""
    if k.kind == "pointwise":
        return tiled_source(k, graph, alt, variant_name(k))
    return pool_source(replace(k, name=variant_name(k)), _pool_graph(k, graph, alt))


def variant_aligned(k: Kernel, graph: Graph, alt: dict[str, tuple]) -> list[tuple[str, int]] | None:
    """(operand, bytes) the vector build of `<kernel>_cl` needs aligned; None: it has no vector build."""
    if k.kind != "pointwise":
        return None
    t = tiling(k, graph, alt)
    return tiled_aligned(k, graph, t) if max(t.vl, t.vs) > 1 else None


def _pool_graph(k: Kernel, graph: Graph, alt: dict[str, tuple]) -> Graph | None:
    """`graph` with the operands in `alt` at those strides and the pooled value (when the kernel
    computes it) laid out as they are, so that threads follow their memory order; None where the
    outputs would then be written in another layout than captured."""
    nodes = graph.by_name()
    x = nodes[nodes[k.anchor].args[0]]
    new = {a: replace(nodes[a], stride=tuple(s)) for a, s in alt.items()}
    if x.name in k.nodes:
        like = next((s for a, s in alt.items() if tuple(nodes[a].shape) == tuple(x.shape)), None)
        if like is None:
            return None
        new[x.name] = replace(x, stride=dense_strides(tuple(x.shape), memory_order(tuple(x.shape), like)))
    before = memory_order(tuple(x.shape), tuple(x.stride))
    after = memory_order(tuple(x.shape), tuple(new.get(x.name, x).stride))
    if any(out_strides(nodes[o], after) != out_strides(nodes[o], before) for o in k.outputs):
        return None
    return replace(graph, nodes=tuple(new.get(n.name, n) for n in graph.nodes))
