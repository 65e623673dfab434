"""Plan: partition the graph into library calls and fused kernels, and decide how each runs."""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import Graph, Plan
from torchweld.options import Options
from torchweld.plan import conv_layout, conv_sites, gemm_pack, gemm_sites, guard, memory
from torchweld.plan.describe import describe
from torchweld.plan.partition import NEVER_FUSED, can_fuse, partition
from torchweld.tiling import device_sms

__all__ = ["NEVER_FUSED", "can_fuse", "describe", "partition", "plan"]


def plan(graph: Graph, options: Options = Options()) -> Plan:
    """The graph as kernels and library calls, with every decision on how they run recorded, each
    made once, in the order the later ones need the earlier."""
    p = partition(graph, options.sms or device_sms())
    layouts = conv_layout.conv_layouts(p) if options.layout_plan else conv_layout.ConvLayouts()
    p = replace(p, layouts=layouts, conv_sites=conv_sites.conv_sites(p, layouts) if options.layout_plan else {},
                gemm_sites=gemm_sites.gemm_sites(p), packed_weights=gemm_pack.packed_weights(graph))
    p = replace(p, written_into=memory.written_into(p))  # reads gemm_sites
    # written_over reads layouts and written_into
    p = replace(p, written_over=memory.written_over(p), elided_views=memory.elided_views(p))
    blockers = guard.graph_blockers(graph)
    return replace(p, guard=guard.guard(p), graph_blockers=blockers, cuda_graph=options.cuda_graph and not blockers)
