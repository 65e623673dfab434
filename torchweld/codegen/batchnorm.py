"""CUDA source for training-mode batch norm: batch statistics per channel, running stats updated.

One block per channel reads its N x (H*W) elements (coalesced along H*W) for shifted sums, then
again to write the normalised values through the epilogue. Thread 0 updates the running
statistics in place as PyTorch does: `running = (1 - momentum) * running + momentum * stat`,
with the unbiased variance for running_var and the biased one for normalising.
"""
from __future__ import annotations

from math import prod

from torchweld.codegen.common import (STORAGE, PointwiseLines, anchored_header, dedupe_loads, kernel_with_launcher,
                                      split_at_anchor)
from torchweld.codegen.ops import lit
from torchweld.ir import Graph, Kernel, Ref


def source(k: Kernel, graph: Graph) -> str:
    """One batch norm kernel and its `extern "C"` launcher."""
    nodes = graph.by_name()
    return anchored_header(k, nodes) + _kernel(k, nodes)


def traffic(k: Kernel, graph: Graph) -> str:
    return "two reads, one write"


def _kernel(k: Kernel, nodes) -> str:
    a = nodes[k.anchor]
    x, w, b, rm, rv = a.args
    N, C, HW = k.shape[0], k.shape[1], prod(k.shape[2:])
    count = N * HW
    # NOTE: with little H*W a block reading one channel would stride by C; then a warp takes 32
    # channels side by side (coalesced) and the block's rows of threads split the batch.
    tx = 32 if HW < 8 else 1
    nt = 1024 if C < 264 and tx == 1 else 256
    ty = nt // tx
    itype = "ull" if prod(k.shape) >= 2**31 else "u"
    IT = "unsigned long long" if itype == "ull" else "unsigned int"
    prologue, epilogue = split_at_anchor(k, nodes)
    pw = PointwiseLines(k, nodes, itype)
    x_extra = (x,) if x in pw.inputs else ()
    block_args = f"0, {nt}, {tx}, {ty}, {'true' if tx == 1 else 'false'}"
    f = lambda v: lit(v, "float")  # noqa: E731

    def loop(body):
        return ([f"  if (live) for (unsigned j = ty; j < {count}u; j += {ty}u) {{",
                 f"    const {IT} idx = (({IT})(j / {HW}u) * {C}u + c) * {HW}{itype} + j % {HW}u;"]
                + ["    " + line for line in body] + ["  }"])

    first = pw.lines(prologue, k.shape, "idx", x_extra)
    B = [f"  const unsigned c = blockIdx.x * {tx}u + threadIdx.x % {tx}u, ty = threadIdx.x / {tx}u;",
         f"  const bool live = c < {C}u;",
         "  float K = 0.0f, s1 = 0.0f, s2 = 0.0f;",
         f"  if (live) {{ const {IT} idx = ({IT})c * {HW}{itype};"] + ["    " + line for line in first] + [f"    K = {x}; }}"]
    B += loop(first + [f"const float d = {x} - K;", "s1 += d;", "s2 = fmaf(d, d, s2);"])
    B += [f"  s1 = tw_block_reduce<{block_args}>(s1);", f"  s2 = tw_block_reduce<{block_args}>(s2);",
          f"  const float dm = s1 * {f(1.0 / count)}, var0 = s2 * {f(1.0 / count)} - dm * dm;",
          "  const float var = var0 < 0.0f ? 0.0f : var0, mean = K + dm;",
          f"  const float rstd = rsqrtf(var + {f(a.attr('eps'))});",
          "  if (live && ty == 0) {",
          f"    in_{rm}[c] = {f(1 - a.attr('momentum'))} * in_{rm}[c] + {f(a.attr('momentum'))} * mean;",
          f"    in_{rv}[c] = {f(1 - a.attr('momentum'))} * in_{rv}[c] + {f(a.attr('momentum'))} * (var * {f(count / max(count - 1, 1))});",
          "  }"]
    expr = f"({x} - mean) * rstd"
    if isinstance(w, Ref):
        expr = f"({expr}) * tw_ld(in_{w}[c])"
    if isinstance(b, Ref):
        expr = f"({expr}) + tw_ld(in_{b}[c])"
    body = pw.lines(prologue, k.shape, "idx", x_extra) + [f"const float {a.name} = {expr};"] + pw.lines(epilogue, k.shape, "idx")
    body += [f"out_{o}[idx] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in k.outputs]
    B += loop(dedupe_loads(body))
    return kernel_with_launcher(k, nodes, B, nt, -(-C // tx), mutable=(rm, rv))
