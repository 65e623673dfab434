"""Simplify: rewrites that hold on every input the reference accepts (NaN and inf included).

Each pass is a pure function Graph -> Graph that appends what it changed to `graph.log`; PASSES
runs them in order. Only floating-point pointwise nodes are rewritten: integer tensors never reach
the fuser. NOTE: reduce_rewrites.py is the one exception to "every input": it reassociates sums
(fp32/fp64 only), so it holds up to rounding on finite inputs and may turn the reference's
inf - inf into inf.
"""
from __future__ import annotations

from typing import Callable

from torchweld.ir import Graph
from torchweld.simplify.rules import (_canonical, _fill_constants, _fma, _functional_copy, _identity, _keepdim_view,
                                      apply_rules, cse, dead_code, in_place_update)
from torchweld.simplify.algebra import collect_linear
from torchweld.simplify.conv_fold import fold_conv_affine
from torchweld.simplify.library_bias import fold_library_bias
from torchweld.simplify.depthwise_crop import fold_depthwise_crop
from torchweld.simplify.reduce_rewrites import reduce_rewrites

PASSES: list[tuple[str, Callable[[Graph], Graph]]] = [
    ("dead_code", dead_code),
    ("fold_depthwise_crop", fold_depthwise_crop),  # NOTE: a causal conv's crop first, so the ops after it fold too
    # NOTE: before the rest: it matches batch norm as capture wrote it, and a reduce rewrite may apply to the folded conv
    ("fold_conv_affine", fold_conv_affine),
    ("reduce_rewrites", reduce_rewrites),  # NOTE: before fold_library_bias, which would move the bias it reads
    ("fold_library_bias", fold_library_bias),
    ("in_place", in_place_update),
    ("canonical", lambda g: apply_rules(g, [_keepdim_view, _fill_constants, _identity, _functional_copy, _canonical],
                                        "rule")),
    ("cse", cse),
    ("collect_linear", collect_linear),
    ("canonical2", lambda g: apply_rules(g, [_identity, _canonical], "rule")),
    ("fma", lambda g: apply_rules(g, [_fma], "fma")),
]


def simplify(graph: Graph, dump: Callable[[str, Graph], None] | None = None) -> Graph:
    """Run every pass in order; `dump(name, graph)` sees the graph after each one."""
    for name, fn in PASSES:
        graph = fn(graph)
        if dump is not None:
            dump(name, graph)
    return graph
