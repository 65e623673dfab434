"""CUDA source for cumsum (an inclusive scan) with its prologue and epilogue.

Over the last dim (I == 1) TY threads share a row, several rows a block when rows are short; the
row goes by in tiles of TY * E elements: each thread sums its E consecutive elements, a block scan
of those sums gives each thread its offset, and a running carry joins the tiles. Over another dim
(I > 1) each thread scans one column, coalesced across the inner dim. Sums are fp32.
"""
from __future__ import annotations

from math import prod

from torchweld.codegen.kernel import STORAGE
from torchweld.tiling import pow2ceil
from torchweld.ir import reduce_geometry
from torchweld.ir import Kernel, ancestors_in

E = 4  # consecutive elements a thread scans in each tile

SCAN_PRELUDE = r"""
// Exclusive scan of v over the TY threads of each row (TY low bits of threadIdx.x); `total` is
// the row's sum. No subtraction: a row of -inf stays -inf. All threads of the block call it.
template <int NT, int TY> __device__ __forceinline__ float tw_block_scan(float v, float& total) {
  __shared__ float sm[NT / 32 + 1];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  constexpr int W = TY < 32 ? TY : 32;
#pragma unroll
  for (int o = 1; o < W; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, v, o, W);
    if ((lane % W) >= o) v += n;
  }
  float exc = __shfl_up_sync(0xffffffffu, v, 1, W);
  if (lane % W == 0) exc = 0.0f;
  if (TY <= 32) {
    total = __shfl_sync(0xffffffffu, v, (lane / W) * W + W - 1, 32);
    return exc;
  }
  constexpr int WPR = TY / 32;
  __syncthreads();  // NOTE: sm may still be read by the previous call
  if (lane == 31) sm[warp] = v;
  __syncthreads();
  const int first = (warp / WPR) * WPR;
  float before = 0.0f, all = 0.0f;
#pragma unroll
  for (int k = 0; k < WPR; ++k) {
    const float s = sm[first + k];
    if (first + k < warp) before += s;
    all += s;
  }
  total = all;
  return warp == first ? exc : before + exc;
}
"""


def scan_source(k: Kernel, nodes) -> str:
    from torchweld.codegen.reduce import _Stage, _assemble, _dedupe_loads

    a = nodes[k.anchor]
    O, R, I = reduce_geometry(a, k.shape)
    itype = "ull" if prod(k.shape) >= 2**31 else "u"
    IT = "unsigned long long" if itype == "ull" else "unsigned int"
    members = set(k.nodes)
    pro_set = ancestors_in(k.anchor, members, nodes)
    pro = [m for m in k.nodes if m in pro_set]
    epi = [m for m in k.nodes if m not in pro_set and m != k.anchor]
    st = _Stage(k, nodes, itype)
    x = a.args[0]
    x_extra = (x,) if x in st.inputs else ()
    reload = bool({r for m in epi for r in nodes[m].inputs()} & pro_set)  # the epilogue reads prologue values

    def write(value: str) -> list[str]:
        body = (st.lines(pro, k.shape, "idx", x_extra) if reload else []) + [f"const float {a.name} = {value};"]
        body += st.lines(epi, k.shape, "idx")
        return _dedupe_loads(body + [f"out_{o}[idx] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in k.outputs])

    if I > 1:  # one thread a column
        nt, blocks = 256, -(-O * I // 256)
        B = [f"  const {IT} g = ({IT})blockIdx.x * {nt}{itype} + threadIdx.x;",
             f"  if (g >= {O * I}{itype}) return;",
             f"  const {IT} base = (g / {I}{itype}) * {R * I}{itype} + g % {I}{itype};",
             "  float carry = 0.0f;",
             f"  for (unsigned r = 0; r < {R}u; ++r) {{",
             f"    const {IT} idx = base + ({IT})r * {I}{itype};"]
        body = st.lines(pro, k.shape, "idx", x_extra) + [f"carry += {x};", f"const float {a.name} = carry;"]
        body += st.lines(epi, k.shape, "idx")
        body += [f"out_{o}[idx] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in k.outputs]
        B += ["    " + b for b in _dedupe_loads(body)] + ["  }"]
        return _assemble(k, nodes, B, nt, blocks)
    ty = min(1024, pow2ceil(-(-R // E)))
    tx = max(min(256 // ty, pow2ceil(O)), -(-32 // ty))
    nt, tile = tx * ty, ty * E
    B = ["  const unsigned t = threadIdx.x;",
         f"  const unsigned ty = t % {ty}u;",
         f"  const {IT} o = ({IT})blockIdx.x * {tx}{itype} + t / {ty}u;",
         f"  const bool live = o < {O}{itype};",
         f"  const {IT} base = o * {R}{itype};",
         "  float carry = 0.0f;",
         f"  for (unsigned r0 = ty * {E}u; r0 < {-(-R // tile) * tile}u; r0 += {tile}u) {{",
         f"    float run = 0.0f, v[{E}];",
         "#pragma unroll",
         f"    for (int e = 0; e < {E}; ++e) {{",
         f"      const unsigned r = r0 + e; const {IT} idx = base + r;",
         f"      if (live && r < {R}u) {{"]
    B += ["        " + b for b in st.lines(pro, k.shape, "idx", x_extra)] + [f"        run += {x};", "      }",
                                                                             "      v[e] = run;", "    }"]
    B += ["    float total;", f"    const float before = tw_block_scan<{nt}, {ty}>(run, total);",
          "#pragma unroll", f"    for (int e = 0; e < {E}; ++e) {{",
          f"      const unsigned r = r0 + e; const {IT} idx = base + r;",
          f"      if (live && r < {R}u) {{"]
    B += ["        " + b for b in write("carry + before + v[e]")] + ["      }", "    }", "    carry += total;", "  }"]
    return _assemble(k, nodes, B, nt, -(-O // tx))
