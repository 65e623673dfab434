"""The kernel kinds codegen writes, one module each, in one table; the `.cu` file assembled from it.

A kind's module has `source(k, graph)`: its kernel(s) and `extern "C"` launcher, opening with a
comment naming the ops it fuses. Its entry here adds what callers need besides: what its Python
wrapper provides (`launch`), how it reads memory (`traffic`, for the emitted file's header), the
fixed C++ it needs pasted first (cuh/ files), and its channels-last build where it has one.
A new kind is a module and one line in `KINDS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torchweld.codegen import (batchnorm, concat, conv_kernel, depthwise, gemm_kernel, pointwise, pointwise_cl, pool,
                               reduce, reduce_rows, scan)
from torchweld.codegen.common import PLAIN, Launch, cuh, prelude
from torchweld.codegen.reduce import ReduceCode
from torchweld.codegen.reduce_rows import RowCode
from torchweld.ir import Graph, Kernel
from torchweld.plan.rows import is_row_kernel


@dataclass(frozen=True)
class Kind:
    """What codegen knows of one kind of kernel."""

    source: Callable[[Kernel, Graph], str]
    launch: Callable[[Kernel, Graph], Launch] = lambda k, graph: PLAIN  # workspace and vector alignment
    traffic: Callable[[Kernel, Graph], str] | None = None  # "one pass", "two reads, one write"...
    preludes: tuple[str, ...] = ()  # cuh/ files its source needs, pasted once after the common prelude
    channels_last: Callable[[Kernel, Graph, dict], str] | None = None  # `<kernel>_cl`, for these operand strides


BLOCK_REDUCE = ("block_reduce.cuh",)


def _gemm_source(k: Kernel, graph: Graph) -> str:
    raise ValueError(f"{k.name}: a gemm kernel's source needs its site: module_source(..., gemm=plan.gemm_ours)")


def _conv_source(k: Kernel, graph: Graph) -> str:
    raise ValueError(f"{k.name}: a conv kernel's source needs its site: module_source(..., conv=plan.conv_ours)")



# NOTE: the scan does not call the block reductions, but every file with a reduce kernel has carried them.
KINDS: dict[str, Kind] = {
    "pointwise": Kind(pointwise.source, pointwise.launch, channels_last=pointwise_cl.source),
    "reduce": Kind(reduce.source, reduce.launch, reduce.traffic, BLOCK_REDUCE),
    "rows": Kind(reduce_rows.source, reduce_rows.launch, reduce_rows.traffic, BLOCK_REDUCE),
    "batch_norm": Kind(batchnorm.source, traffic=batchnorm.traffic, preludes=BLOCK_REDUCE),
    "scan": Kind(scan.source, traffic=scan.traffic, preludes=BLOCK_REDUCE + ("block_scan.cuh",)),
    "pool": Kind(pool.source, channels_last=pool.channels_last),
    "depthwise": Kind(depthwise.source),
    "concat": Kind(concat.source, traffic=concat.traffic),
    # NOTE: built from its plan/gemm_ours site (module_source's `gemm`), its main loops once per file
    "gemm": Kind(_gemm_source, traffic=lambda k, graph: "operands read once per output tile, one store"),
    # NOTE: built from its plan/conv_ours site (module_source's `conv`), its main loop once per file
    "conv": Kind(_conv_source, traffic=lambda k, graph: "input gathered per output tile (implicit GEMM), one store"),
}
# Reduce kernels whose anchor has a kind of its own; the rest are "rows" or "reduce".
ANCHOR_KINDS = {"batch_norm": "batch_norm", "cumsum": "scan", "cumprod": "scan", "cat": "concat"}


def kind_of(k: Kernel, nodes) -> str:
    """The kind codegen writes `k` as: the plan's, or for a reduce kernel the one its anchor and members make."""
    if k.kind != "reduce":
        return k.kind
    op = nodes[k.anchor].op
    if op in ANCHOR_KINDS:
        return ANCHOR_KINDS[op]
    return "rows" if is_row_kernel(list(k.nodes), nodes) else "reduce"


def module_source(kernels: list[Kernel], graph: Graph, layouts=None, gemm: dict | None = None,
                  conv: dict | None = None) -> str:
    """The whole `.cu` file: prelude, then every kernel with its launcher, and its channels-last
    build where `layouts` (conv_layout.ConvLayouts) lets operands come channels-last. `gemm`: the
    plan's `gemm_ours`, whose sites the "gemm" kernels are built from; `conv`: `conv_ours`, the "conv" kernels'."""
    nodes = graph.by_name()
    kinds = [KINDS[kind_of(k, nodes)] for k in kernels]
    lowp = any(n.dtype in ("float16", "bfloat16") for n in graph.nodes)
    preludes = dict.fromkeys(name for kind in kinds for name in kind.preludes)  # once each, in the order kernels first need them
    text = prelude(lowp) + "".join("\n" + cuh(name) for name in preludes)
    sites = {s.kernel.name: s for s in (gemm or {}).values() if not isinstance(s, str)}
    convs = {s.kernel.name: s for s in (conv or {}).values() if not isinstance(s, str)}
    ours_conv = [convs[k.name] for k in kernels if k.kind == "conv"]
    if any(k.kind == "gemm" for k in kernels):  # NOTE: carries the convolutions' wgmma wrappers too (one prelude)
        extra = conv_kernel.uses(ours_conv, graph) if ours_conv else frozenset()
        text += "\n" + gemm_kernel.prelude([sites[k.name] for k in kernels if k.kind == "gemm"], graph, extra)
    if ours_conv:
        text += "\n" + conv_kernel.prelude(ours_conv, graph)
    parts = []
    for k, kind in zip(kernels, kinds):
        if k.kind == "conv":
            parts.append(conv_kernel.source(k, graph, convs[k.name]))
        else:
            parts.append(gemm_kernel.source(k, graph, sites[k.name]) if k.kind == "gemm" else kind.source(k, graph))
        strides = layouts.of(k) if layouts is not None else {}
        if strides:
            parts.append(kind.channels_last(k, graph, strides))
    return text + "\n" + "\n".join(parts)


def kernel_launch(k: Kernel, graph: Graph) -> Launch:
    """What `k`'s Python wrapper must provide: a workspace, and the pointers its vector build needs aligned."""
    return KINDS[kind_of(k, graph.by_name())].launch(k, graph)


def kernel_traffic(k: Kernel, graph: Graph) -> str | None:
    """How `k` reads memory, for the emitted file's header (None: its kind says nothing)."""
    traffic = KINDS[kind_of(k, graph.by_name())].traffic
    return traffic(k, graph) if traffic else None


def generator(k: Kernel, nodes) -> ReduceCode:
    """The code of a reduce or row kernel, whose layout and register cache the tests read."""
    return RowCode(k, nodes) if kind_of(k, nodes) == "rows" else ReduceCode(k, nodes)
