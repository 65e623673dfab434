"""Kernels that repeat another's code: a loop unrolled by the trace (one step of a hand-written GRU or
RNN cell per time step) makes one kernel per step, each the same code over other tensors. The file
prints that code once, and each step calls it with its own operands.

Two kernels repeat each other where their CUDA source and their Python wrapper are the same text
once the names in them (the kernel's, its values') are renamed in order of first appearance, and
comments dropped: the same code, reading and writing the same layouts, over other tensors.
"""
from __future__ import annotations

import re

from torchweld.codegen import KINDS, kind_of
from torchweld.emit.gemm_ways import gemm_ways_function
from torchweld.emit.wrappers import wrapper
from torchweld.ir import Plan

# NOTE: a repeat is printed once only where a kernel's code comes back this many times (a loop's steps):
# a block written twice by hand keeps both copies, as it always had them
MIN_REPEATS = 3
# The names the source and wrapper give a kernel (k12, with its suffixes) and values (v3, p0, x1, v3_lib,
# v3_1, with their in_/out_/a_/r_/w_ prefixes); a name is never preceded by a letter or digit.
_NAMES = re.compile(r"(?<![A-Za-z0-9])(?:k|v|p|x)\d+(?:_(?:lib|\d+))*(?![A-Za-z0-9])")
_COMMENT = re.compile(r"^\s*(//|#).*$|  (//|#) .*$|\"\"\".*?\"\"\"", re.M)
# Our GEMM's Python side is more than a wrapper: never shared. A kernel timed against the library at its
# GEMM site (`_lt_<kernel>`) shares that function and its timing too.
_SHARED_KINDS = frozenset({"pointwise", "reduce", "rows", "scan", "pool", "depthwise", "batch_norm"})


def canonical(text: str) -> str:
    """`text` without comments, its names renamed @0@, @1@, ... in order of first appearance (a
    spelling no source holds, so a renamed name never meets a name of the source's own)."""
    seen: dict[str, str] = {}
    return _NAMES.sub(lambda m: seen.setdefault(m.group(0), f"@{len(seen)}@"), _COMMENT.sub("", text))


def repeats(plan: Plan) -> dict[str, str]:
    """{kernel: the first kernel whose code it runs}, for code that comes back MIN_REPEATS times or more."""
    nodes = plan.graph.by_name()
    timed = plan.timed_gemm_sites
    first: dict[str, list[str]] = {}
    for k in plan.kernels:
        kind = kind_of(k, nodes)
        if kind not in _SHARED_KINDS:
            continue
        strides = plan.layouts.of(k) if plan.layouts is not None else {}
        source = KINDS[kind].source(k, plan.graph) + (KINDS[kind].channels_last(k, plan.graph, strides)
                                                       if strides else "")
        ways = gemm_ways_function(timed[k.name], k, plan) if k.name in timed else ""
        first.setdefault(canonical("\n".join((source, wrapper(k, plan), ways))), []).append(k.name)
    return {k: same[0] for same in first.values() if len(same) >= MIN_REPEATS for k in same[1:]}
