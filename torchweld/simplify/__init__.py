"""Simplify: rewrites that hold on every input the reference accepts (NaN and inf included).

Each pass is a pure function Graph -> Graph, in a file of its own, that appends what it changed to
`graph.log`; PASSES runs them in order. Local rewrites are rule tables (rewrite.py applies them);
only floating-point pointwise nodes are rewritten by the algebraic ones, as integer tensors never
reach the fuser. NOTE: reduce_rewrites.py is the one exception to "every input": it reassociates
sums (fp32/fp64 only), so it holds up to rounding on finite inputs and may turn the reference's
inf - inf into inf.
"""
from __future__ import annotations

from typing import Callable

from torchweld.ir import Graph
from torchweld.simplify.canonical import CANONICAL
from torchweld.simplify.collect_linear import collect_linear
from torchweld.simplify.conv_fold import fold_conv_affine
from torchweld.simplify.cse import cse
from torchweld.simplify.dead_code import dead_code
from torchweld.simplify.depthwise_crop import fold_depthwise_crop
from torchweld.simplify.fill import FILL
from torchweld.simplify.fma import FMA
from torchweld.simplify.functional_copy import FUNCTIONAL_COPY
from torchweld.simplify.identity import IDENTITY
from torchweld.simplify.in_place import in_place_update
from torchweld.simplify.keepdim import KEEPDIM
from torchweld.simplify.library_bias import fold_library_bias
from torchweld.simplify.reduce_rewrites import reduce_rewrites
from torchweld.simplify.rewrite import rule_pass

PASSES: list[tuple[str, Callable[[Graph], Graph]]] = [
    # NOTE: first, so that the passes that count a value's readers count only live ones
    ("dead_code", dead_code),
    # NOTE: a causal conv's crop first, so that the ops after it fold too
    ("fold_depthwise_crop", fold_depthwise_crop),
    # NOTE: before the rest: it matches batch norm as capture wrote it, and a reduce rewrite may apply to the folded conv
    ("fold_conv_affine", fold_conv_affine),
    # NOTE: before fold_library_bias, which would move the bias it reads
    ("reduce_rewrites", reduce_rewrites),
    ("fold_library_bias", fold_library_bias),
    ("in_place", in_place_update),  # aten calls only: no other pass reads what it changes
    # NOTE: each node meets the tables in this order: a fill becomes a number before the identities
    # look for their 1 and 0 (`x * ones_like(x)` goes in one visit), and the identities see `x/1` and
    # `x-0` before canonical turns them into a product and a sum
    ("canonical", rule_pass("rule", KEEPDIM, FILL, IDENTITY, FUNCTIONAL_COPY, CANONICAL)),
    # NOTE: after canonical, so that `c+x` and `x+c`, `x/2` and `x*0.5` are one value
    ("cse", cse),
    # NOTE: after cse, so that equal terms are one name and merge (`exp(x) + exp(x)` -> `2*exp(x)`);
    # after canonical, so that a quotient or difference by a constant is a product or a sum
    ("collect_linear", collect_linear),
    # NOTE: drops the `x*1` copy collect_linear leaves where a sum comes down to one term
    ("canonical2", rule_pass("rule", IDENTITY, CANONICAL)),
    # NOTE: last: every rule and pass before it reads products and sums, which an fma hides
    ("fma", rule_pass("fma", FMA)),
]


def simplify(graph: Graph, dump: Callable[[str, Graph], None] | None = None) -> Graph:
    """Run every pass in order; `dump(name, graph)` sees the graph after each one."""
    for name, run in PASSES:
        graph = run(graph)
        if dump is not None:
            dump(name, graph)
    return graph
