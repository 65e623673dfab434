"""Whose work the candidate's forward is: its own kernels against library and PyTorch kernels.

The candidate's own kernels are those named in its source (CUDA `__global__`, Triton `@jit`); the
profiler of one forward on never-seen inputs gives each launched kernel's GPU time. A candidate whose own
kernels do a trivial share of that time launched a decoy while PyTorch did the work (`decoy_kernel`); one
that defines none is `no_kernel` where the problem asks for custom kernels (`--require-kernel`).
"""
from __future__ import annotations

import re

from torchweld.judge.build import kernel_names
from torchweld.judge.guards import cheat


def _whole_word(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


def split(kernels: list[tuple[str, float]], defined: set[str]) -> dict:
    """GPU microseconds in the candidate's own kernels and in everything else, and which of its own ran."""
    own = [(k, us) for k, us in kernels if any(_whole_word(d, k) for d in defined)]
    own_us = sum(us for _, us in own)
    total = sum(us for _, us in kernels)
    return {"own_us": round(own_us, 3), "library_us": round(total - own_us, 3),
            "own_share": own_us / total if total > 0 else None,
            "own_kernels": sorted({k if len(k) <= 60 else k[:57] + "..." for k, _ in own})[:6],
            "library_kernels": sorted({k if len(k) <= 60 else k[:57] + "..." for k, _ in kernels
                                       if (k, _) not in own})[:6]}


def verdict(kernels: list[tuple[str, float]] | None, defined: set[str], decoy_share: float):
    """(outcome or None, message, cheats, the split) for one profiled forward; kernels None: no profiler."""
    if kernels is None or not defined:
        return None, "", [], None
    work = split(kernels, defined)
    if not work["own_kernels"]:
        seen = work["library_kernels"][:3]
        return None, "", [cheat("no_custom_kernel", f"forward() launches no kernel of its own (none of its kernels "
                                                    f"{sorted(defined)[:4]} ran); kernels that ran: "
                                                    f"{seen or 'none'}")], work
    share = work["own_share"]
    if share is not None and share < decoy_share:
        return "decoy_kernel", (f"its own kernels ({', '.join(work['own_kernels'][:3])}) run {share:.2%} of the "
                                f"forward's GPU time ({work['own_us']:.1f} of {work['own_us'] + work['library_us']:.1f}"
                                f" us); library and PyTorch kernels do the rest "
                                f"({', '.join(work['library_kernels'][:3])})"), [], work
    return None, "", [], work


def require(j, source: str) -> None:
    """Under --require-kernel, an answer that defines no CUDA/Triton kernel of its own ends here (`no_kernel`)."""
    if j.opts.require_kernel and not kernel_names(source):
        j.finish("no_kernel", "defines no CUDA or Triton kernel of its own (--require-kernel): its forward runs "
                              "PyTorch and library ops only")
