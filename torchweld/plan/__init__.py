"""Plan: partition the graph into library calls and fused kernels, and decide how each runs."""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import Graph, Plan
from torchweld.options import Options
from torchweld.plan import batch, conv_layout, conv_ours, conv_sites, gemm_ours, gemm_pack, gemm_sites, guard, memory
from torchweld.plan.describe import describe
from torchweld.plan.held import held_values, masked
from torchweld.plan.partition import NEVER_FUSED, can_fuse, partition
from torchweld.tiling import device_sms

__all__ = ["NEVER_FUSED", "can_fuse", "describe", "partition", "plan"]


def plan(graph: Graph, options: Options = Options(), gemm_check: gemm_ours.Check | None = None,
         conv_check: conv_ours.Check | None = None) -> Plan:
    """The graph as kernels and library calls, with every decision on how they run recorded, each
    made once, in the order the later ones need the earlier. `gemm_check`: codegen's word on whether
    our GEMM builds a site (the pipeline hands it in; plan/ does not import codegen); `conv_check`: ours
    for convolutions."""
    held = held_values(graph)
    p = replace(partition(masked(graph, held), options.sms or device_sms()), graph=graph, held=held)
    ours = gemm_ours.gemm_ours(p, options.tf32, gemm_check) if options.gemm else {}
    ours = {g: site for g, site in ours.items() if g not in held}  # NOTE: a held GEMM is made once, in PyTorch
    if ours:  # NOTE: before the other decisions, which then see our GEMM kernels in place of those they fold
        p = replace(gemm_ours.apply(p, ours), gemm_ours=ours)
    convs = conv_ours.conv_ours(p, options.tf32, conv_check) if options.conv_ours else {}
    convs = {c: site for c, site in convs.items() if c not in held}  # NOTE: as a held GEMM
    if convs:  # NOTE: before the layout plan: a convolution ours runs is no library site
        p = replace(conv_ours.apply(p, convs), conv_ours=convs)
    layouts = conv_layout.conv_layouts(p) if options.layout_plan else conv_layout.ConvLayouts()
    p = replace(p, layouts=layouts, conv_sites=conv_sites.conv_sites(p, layouts) if options.layout_plan else {},
                gemm_sites={k: s for k, s in _library_sites(p).items() if getattr(s, "gemm", None) not in held},
                packed_weights=_packed(p))
    p = replace(p, written_into=memory.written_into(p))  # reads gemm_sites
    # written_over reads layouts and written_into
    # NOTE: `_tw_held` makes the held views too: a kernel reads what it returns
    # and no kernel writes over a held value (the next call reads it again)
    p = replace(p, written_over={o: a for o, a in memory.written_over(p).items() if a not in held},
                elided_views={v: t for v, t in memory.elided_views(p).items() if v not in held})
    blockers = guard.graph_blockers(graph)
    g = guard.guard(p)
    if held:  # NOTE: a held value has its parameters' dtype and device: forward checks them as the kernels'
        nodes = graph.by_name()
        made_from = [a for h in held for a in nodes[h].inputs() if nodes[a].op == "param"]
        g = replace(g, params=tuple(dict.fromkeys(g.params + tuple(made_from))))
    if ours:
        g = replace(g, params=gemm_ours.params_read(p, g.params))
    p = replace(p, guard=g, graph_blockers=blockers, cuda_graph=options.cuda_graph and not blockers)
    return batch.runtime_batch(p)  # NOTE: last: it reads the layouts and whether the fast path is a CUDA graph


def _packed(p: Plan) -> dict[str, str]:
    """Packed weights, less the transposes our GEMM kernels read in place through their strides."""
    read = {x for k in p.kernels if k.kind == "gemm" for x in k.inputs}
    return {t: w for t, w in gemm_pack.packed_weights(p.graph).items() if t not in read}


def _library_sites(p: Plan) -> dict:
    """GEMM sites (gemm_sites.py) of the GEMMs the library runs: not a kernel of ours, nor a kernel
    after a GEMM our kernel runs (that GEMM is made once, by ours)."""
    ours = {k.anchor for k in p.kernels if k.kind == "gemm"}
    return {k: s for k, s in gemm_sites.gemm_sites(p).items()
            if p.kernel(k).kind != "gemm" and getattr(s, "gemm", None) not in ours}
