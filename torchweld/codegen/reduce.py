"""CUDA source for reduce kernels: a reduction, softmax or norm with its prologue and epilogue.

The anchor's input is seen as [O, R, I] (reduce_geometry) and reduced over R. Rows with I == 1
put a row's threads side by side (`ty` fastest: coalesced along the row, short rows packed
several to a block); with I > 1 threads run along the contiguous inner dim and loop over R (the
channel case). Each thread accumulates in fp32, then a warp-shuffle + shared-memory block
reduction combines the threads of one output. The pointwise prologue is recomputed on every
read instead of being stored; softmax and norms read their input twice (statistics, then write).
"""
from __future__ import annotations

from math import prod

from torchweld.codegen.kernel import STORAGE, coalesce, compute_type, index_expr
from torchweld.codegen.ops import cuda_expr, lit
from torchweld.ir import REDUCTION, Node, Ref, format_node, reduce_geometry
from torchweld.plan import Kernel, ancestors_in

REDUCE_PRELUDE = r"""
// Block reductions over the threads that share an output: `ty` in the low bits of threadIdx.x
// (RM: one row's threads side by side) or in the high bits (inner-dim columns side by side).
template <int OP> __device__ __forceinline__ float tw_comb(float a, float b) {
  return OP == 0 ? a + b : OP == 1 ? tw_max(a, b) : tw_min(a, b);
}
template <int OP, int NT, int TX, int TY, bool RM>
__device__ __forceinline__ float tw_block_reduce(float v) {
  __shared__ float sm[NT];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (RM) {
#pragma unroll
    for (int o = (TY < 32 ? TY : 32) / 2; o > 0; o >>= 1) v = tw_comb<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (TY <= 32) return v;
    constexpr int WPR = TY > 32 ? TY / 32 : 1;  // warps per row
    __syncthreads();  // NOTE: sm may still be read by the previous call
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    float r = sm[first];
#pragma unroll
    for (int k = 1; k < WPR; ++k) r = tw_comb<OP>(r, sm[first + k]);
    return r;
  } else {
#pragma unroll
    for (int o = 16; o >= TX; o >>= 1) v = tw_comb<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    constexpr int NW = NT / 32;
    if (NW == 1) return v;
    __syncthreads();
    if (lane < TX) sm[warp * 32 + lane] = v;
    __syncthreads();
    const int tx = lane % TX;
    float r = sm[tx];
#pragma unroll
    for (int k = 1; k < NW; ++k) r = tw_comb<OP>(r, sm[k * 32 + tx]);
    return r;
  }
}
// Online softmax step: running max m and sum s of exp(x - m). Equal values add 1 so that a row
// of -inf (or +inf) never computes inf - inf here; NaN inputs make s NaN.
__device__ __forceinline__ void tw_online(float x, float& m, float& s) {
  if (x > m) { s = s * expf(m - x) + 1.0f; m = x; }
  else if (x == m) { s += 1.0f; }
  else { s += expf(x - m); }
}
"""


def pow2ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def layout(O: int, R: int, I: int) -> tuple[int, int, int, bool, int]:
    """(threads, TX, TY, row-major, blocks): TX outputs a block, TY threads per output."""
    for nt in (256, 1024):
        if I == 1:
            ty = min(nt, pow2ceil(R))
            tx = nt // ty
            blocks = -(-O // tx)
        else:
            tx = min(32, pow2ceil(I))
            ty = nt // tx
            blocks = O * -(-I // tx)
        # NOTE: few long rows: a bigger block reads a row with more loads in flight.
        if not (blocks < 264 and R >= 4096 and nt == 256):
            return nt, tx, ty, I == 1, blocks
    return nt, tx, ty, I == 1, blocks


class _Stage:
    """CUDA lines computing some members at one element, loading the tensors they read."""

    def __init__(self, kernel: Kernel, nodes: dict[str, Node], itype: str):
        self.kernel, self.nodes, self.itype = kernel, nodes, itype
        self.inputs = set(kernel.inputs)

    def load(self, name: str, shape: tuple, idx: str) -> str:
        n = self.nodes[name]
        dims = coalesce(tuple(shape), [(n.shape, n.stride)])[0]
        return f"const auto {name} = tw_ld(in_{name}[{index_expr(dims, idx, self.itype)}]);"

    def lines(self, members: list[str], shape: tuple, idx: str, extra: tuple = ()) -> list[str]:
        out, loaded = [], set()
        for m in list(members) + list(extra):
            refs = [m] if m in extra else self.nodes[m].inputs()
            for r in refs:
                if r in self.inputs and r not in loaded:
                    loaded.add(r)
                    out.append(self.load(r, shape, idx))
        for m in members:
            node = self.nodes[m]
            ctype = compute_type(node.dtype)
            args = [_arg(a, ctype) for a in node.args]
            out.append(f"const {ctype} {m} = {cuda_expr(node, args, ctype)};")
        return out


def _arg(a, ctype: str) -> str:
    if isinstance(a, Ref):
        return str(a)
    if a is None:
        return lit(float("inf"), ctype)
    return lit(a, "bool" if isinstance(a, bool) else ctype)


def reduce_source(k: Kernel, graph) -> str:
    """One reduce kernel and its `extern "C"` launcher."""
    nodes = graph.by_name()
    a = nodes[k.anchor]
    if a.op == "batch_norm":
        from torchweld.codegen.batchnorm import batch_norm_source

        return _header(k, nodes) + batch_norm_source(k, nodes)
    O, R, I = reduce_geometry(a, k.shape)
    nt, TX, TY, rm, blocks = layout(O, R, I)
    members = set(k.nodes)
    pro_set = ancestors_in(k.anchor, members, nodes)
    pro = [m for m in k.nodes if m in pro_set]
    epi = [m for m in k.nodes if m not in pro_set and m != k.anchor]
    itype = "ull" if prod(k.shape) >= 2**31 else "u"
    IT = "unsigned long long" if itype == "ull" else "unsigned int"
    st = _Stage(k, nodes, itype)
    x = a.args[0]
    x_extra = (x,) if x in st.inputs else ()
    B = []
    B.append("  const unsigned t = threadIdx.x;")
    if rm:
        B += [f"  const unsigned ty = t % {TY}u;",
              f"  const {IT} o = ({IT})blockIdx.x * {TX}{itype} + t / {TY}u, i = 0;",
              f"  const bool live = o < {O}{itype};"]
    else:
        tiles = -(-I // TX)
        B += [f"  const unsigned ty = t / {TX}u;",
              f"  const {IT} o = blockIdx.x / {tiles}u, i = ({IT})(blockIdx.x % {tiles}u) * {TX}{itype} + t % {TX}u;",
              f"  const bool live = i < {I}{itype};"]
    B.append(f"  const {IT} base = o * {R * I}{itype} + i;")
    red = f"{nt}, {TX}, {TY}, {'true' if rm else 'false'}"

    def loop(body: list[str]) -> list[str]:
        return ([f"  if (live) for (unsigned r = ty; r < {R}u; r += {TY}u) {{",
                 f"    const {IT} idx = base + ({IT})r * {I}{itype};"]
                + ["    " + b for b in body] + ["  }"])

    first = st.lines(pro, k.shape, "idx", x_extra)
    op = a.op
    if op in ("sum", "mean", "amax", "amin"):
        init, upd, code = {"sum": ("0.0f", "acc += {x};", 0), "mean": ("0.0f", "acc += {x};", 0),
                           "amax": ("-INFINITY", "acc = tw_max(acc, {x});", 1),
                           "amin": ("INFINITY", "acc = tw_min(acc, {x});", 2)}[op]
        B.append(f"  float acc = {init};")
        B += loop(first + [upd.format(x=x)])
        B.append(f"  acc = tw_block_reduce<{code}, {red}>(acc);")
        value = f"acc * {lit(1.0 / R, 'float')}" if op == "mean" else "acc"
    elif op in ("logsumexp", "softmax", "log_softmax"):
        B.append("  float m = -INFINITY, s = 0.0f;")
        B += loop(first + [f"tw_online({x}, m, s);"])
        B.append(f"  const float M = tw_block_reduce<1, {red}>(m);")
        B.append(f"  const float S = tw_block_reduce<0, {red}>(m == M ? s : s * expf(m - M));")
        # NOTE: eager logsumexp returns the infinite max itself; softmax of such a row is NaN.
        value = "(S != S) ? S : isinf(M) ? M : M + logf(S)"
    else:  # layer_norm, group_norm: shifted sums (shift = the row's first value) against cancellation
        B.append("  float K = 0.0f, s1 = 0.0f, s2 = 0.0f;")
        B.append(f"  if (live) {{ const {IT} idx = base;")
        B += ["    " + b for b in first] + [f"    K = {x}; }}"]
        B += loop(first + [f"const float d = {x} - K;", "s1 += d;", "s2 = fmaf(d, d, s2);"])
        B.append(f"  s1 = tw_block_reduce<0, {red}>(s1);")
        B.append(f"  s2 = tw_block_reduce<0, {red}>(s2);")
        B.append(f"  const float dm = s1 * {lit(1.0 / R, 'float')}, var0 = s2 * {lit(1.0 / R, 'float')} - dm * dm;")
        B.append(f"  const float mean = K + dm, rstd = rsqrtf((var0 < 0.0f ? 0.0f : var0) + {lit(a.attr('eps'), 'float')});")
    outs = [o for o in k.outputs]
    if op in REDUCTION:
        B.append("  if (live && ty == 0) {")
        B.append(f"    const {IT} oi = o * {I}{itype} + i;")
        B.append(f"    const float {a.name} = {value};")
        B += ["    " + b for b in st.lines(epi, a.shape, "oi")]
        B += [f"    out_{o}[oi] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in outs]
        B.append("  }")
    else:
        if op == "softmax":
            B.append("  const float Sd = isinf(M) ? NAN : S;")
            expr = f"expf({x} - M) / Sd"
        elif op == "log_softmax":
            B.append("  const float L = isinf(M) ? NAN : logf(S);")
            expr = f"({x} - M) - L"
        else:
            expr = f"({x} - mean) * rstd"
            chan = "r" if op == "layer_norm" else _group_channel(a, k.shape, O, R)
            for arg, fmt in ((a.args[1], "{e} * tw_ld(in_{w}[{c}])"), (a.args[2], "{e} + tw_ld(in_{w}[{c}])")):
                if isinstance(arg, Ref):
                    expr = fmt.format(e=f"({expr})", w=arg, c=chan)
        body = st.lines(pro, k.shape, "idx", x_extra) + [f"const float {a.name} = {expr};"]
        body += st.lines(epi, k.shape, "idx")
        body += [f"out_{o}[idx] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in outs]
        B += loop(_dedupe_loads(body))
    return _header(k, nodes) + _assemble(k, nodes, B, nt, blocks)


def _group_channel(a: Node, shape: tuple, O: int, R: int) -> str:
    """Channel of element r of row o in group norm: (o % G) * (C / G) + r / (H*W)."""
    G = a.attr("groups")
    hw = prod(shape[2:])
    return f"(unsigned)(o % {G}u) * {shape[1] // G}u + r / {hw}u"


def _dedupe_loads(body: list[str]) -> list[str]:
    """Drop a second load of a tensor already loaded at the same element."""
    seen, out = set(), []
    for line in body:
        if line.startswith("const auto ") and line in seen:
            continue
        seen.add(line)
        out.append(line)
    return out


def _header(k: Kernel, nodes) -> str:
    a = nodes[k.anchor]
    lines = [f"// {k.name}: {a.op} of {tuple(k.shape)} with {len(k.nodes) - 1} fused pointwise ops"]
    for m in k.nodes:
        node = nodes[m]
        lines.append("//   " + format_node(node).split("  #")[0] + (f"    <- {node.origin}" if node.origin else ""))
    return "\n".join(lines) + "\n"


def params(k: Kernel, nodes, mutable: tuple = ()) -> tuple[str, str, str]:
    """Kernel parameters, launcher parameters, and the launcher's casts."""
    ins = [f"{'' if a in mutable else 'const '}{STORAGE[nodes[a].dtype]}* __restrict__ in_{a}" for a in k.inputs]
    outs = [f"{STORAGE[nodes[o].dtype]}* __restrict__ out_{o}" for o in k.outputs]
    ptrs = [f"const void* in_{a}" for a in k.inputs] + [f"void* out_{o}" for o in k.outputs]
    casts = [f"({'' if a in mutable else 'const '}{STORAGE[nodes[a].dtype]}*)in_{a}" for a in k.inputs] + [
        f"({STORAGE[nodes[o].dtype]}*)out_{o}" for o in k.outputs]
    return ", ".join(ins + outs), ", ".join(ptrs), ", ".join(casts)


def _assemble(k: Kernel, nodes, body: list[str], nt: int, blocks: int, mutable: tuple = ()) -> str:
    kparams, lparams, casts = params(k, nodes, mutable)
    return "\n".join(
        [f"__global__ void __launch_bounds__({nt}) {k.name}({kparams}) {{"] + body + ["}", "",
         f'extern "C" int tw_launch_{k.name}({lparams}, int vec, void* stream) {{',
         "  (void)vec;",
         f"  {k.name}<<<{blocks}u, {nt}, 0, (cudaStream_t)stream>>>({casts});",
         "  return (int)cudaGetLastError();", "}", ""])
