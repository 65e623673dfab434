"""CUDA source for cumsum and cumprod (inclusive scans) with their prologue and epilogue.

Over the last dim (I == 1) TY threads share a row, several rows a block when rows are short; the
row goes by in tiles of TY * E elements: each thread sums its E consecutive elements, a block scan
of those sums gives each thread its offset, and a running carry joins the tiles. Over another dim
(I > 1) each thread scans one column, coalesced across the inner dim. Sums and products are fp32.
"""
from __future__ import annotations

from math import prod

from torchweld.codegen.common import (STORAGE, PointwiseLines, anchored_header, blocks_of, dedupe_loads,
                                      kernel_with_launcher, outer, split_at_anchor)
from torchweld.ir import Graph, Kernel, reduce_geometry
from torchweld.tiling import pow2ceil

E = 4  # consecutive elements a thread scans in each tile


def source(k: Kernel, graph: Graph) -> str:
    """One cumsum or cumprod kernel and its `extern "C"` launcher (its block scan is in cuh/block_scan.cuh)."""
    nodes = graph.by_name()
    return anchored_header(k, nodes) + _kernel(k, nodes)


def traffic(k: Kernel, graph: Graph) -> str:
    return "one pass"


def _kernel(k: Kernel, nodes) -> str:
    a = nodes[k.anchor]
    O, R, I = reduce_geometry(a, k.shape)
    itype = "ull" if prod(k.shape) >= 2**31 else "u"
    IT = "unsigned long long" if itype == "ull" else "unsigned int"
    prologue, epilogue = split_at_anchor(k, nodes)
    pw = PointwiseLines(k, nodes, itype)
    x = a.args[0]
    x_extra = (x,) if x in pw.inputs else ()
    product = a.op == "cumprod"
    one, op = ("1.0f", "*") if product else ("0.0f", "+")
    reload = bool({r for m in epilogue for r in nodes[m].inputs()} & set(prologue))  # the epilogue reads prologue values

    def write(value: str) -> list[str]:
        body = (pw.lines(prologue, k.shape, "idx", x_extra) if reload else []) + [f"const float {a.name} = {value};"]
        body += pw.lines(epilogue, k.shape, "idx")
        return dedupe_loads(body + [f"out_{o}[idx] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in k.outputs])

    if I > 1:  # one thread a column
        nt, blocks = 256, blocks_of(k, O * I, 256)
        B = [f"  const {IT} g = ({IT})blockIdx.x * {nt}{itype} + threadIdx.x;",
             f"  if (g >= {outer(k, O * I, itype)}) return;",
             f"  const {IT} base = (g / {I}{itype}) * {R * I}{itype} + g % {I}{itype};",
             f"  float carry = {one};",
             f"  for (unsigned r = 0; r < {R}u; ++r) {{",
             f"    const {IT} idx = base + ({IT})r * {I}{itype};"]
        body = pw.lines(prologue, k.shape, "idx", x_extra) + [f"carry {op}= {x};", f"const float {a.name} = carry;"]
        body += pw.lines(epilogue, k.shape, "idx")
        body += [f"out_{o}[idx] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in k.outputs]
        B += ["    " + b for b in dedupe_loads(body)] + ["  }"]
        return kernel_with_launcher(k, nodes, B, nt, blocks)
    ty = min(1024, pow2ceil(-(-R // E)))
    tx = max(min(256 // ty, pow2ceil(O)), -(-32 // ty))
    nt, tile = tx * ty, ty * E
    B = ["  const unsigned t = threadIdx.x;",
         f"  const unsigned ty = t % {ty}u;",
         f"  const {IT} o = ({IT})blockIdx.x * {tx}{itype} + t / {ty}u;",
         f"  const bool live = o < {outer(k, O, itype)};",
         f"  const {IT} base = o * {R}{itype};",
         f"  float carry = {one};",
         f"  for (unsigned r0 = ty * {E}u; r0 < {-(-R // tile) * tile}u; r0 += {tile}u) {{",
         f"    float run = {one}, v[{E}];",
         "#pragma unroll",
         f"    for (int e = 0; e < {E}; ++e) {{",
         f"      const unsigned r = r0 + e; const {IT} idx = base + r;",
         f"      if (live && r < {R}u) {{"]
    B += ["        " + b for b in pw.lines(prologue, k.shape, "idx", x_extra)] + [f"        run {op}= {x};", "      }",
                                                                             "      v[e] = run;", "    }"]
    scan = f"tw_block_scan<{nt}, {ty}, true>" if product else f"tw_block_scan<{nt}, {ty}>"
    B += ["    float total;", f"    const float before = {scan}(run, total);",
          "#pragma unroll", f"    for (int e = 0; e < {E}; ++e) {{",
          f"      const unsigned r = r0 + e; const {IT} idx = base + r;",
          f"      if (live && r < {R}u) {{"]
    B += ["        " + b for b in write(f"carry {op} before {op} v[e]")]
    B += ["      }", "    }", f"    carry {op}= total;", "  }"]
    return kernel_with_launcher(k, nodes, B, nt, blocks_of(k, O, tx))
