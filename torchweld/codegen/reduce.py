"""CUDA source for reduce kernels: a reduction, softmax or norm with its prologue and epilogue.

The anchor's input is seen as [O, R, I] (reduce_geometry) and reduced over R; reduce_layout.py
says how threads cover it. Each thread accumulates in fp32 (reduce_stats.py), then a
warp-shuffle + shared-memory block reduction combines the threads of one output. The pointwise
prologue is recomputed on every read instead of being stored. Softmax and norms keep a thread's
elements in registers between their statistics and their write when they fit (one read), else
read twice. A split output runs two kernels: partial statistics per chunk into a workspace,
then one that merges them (and, for softmax and norms, writes its chunk). Kernels are templates
over the vector width V: the launcher takes V = 16 bytes where every full-size pointer is aligned.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from torchweld.codegen.kernel import ITEMSIZE, STORAGE, coalesce, compute_type, index_expr, is_contiguous
from torchweld.codegen.ops import cuda_expr, lit
from torchweld.tiling import Layout, layout
from torchweld.codegen.reduce_stats import Stats, nstats
from torchweld.ir import Node, Ref, format_node, reduce_geometry
from torchweld.ir import Kernel, ancestors_in
from torchweld.plan.rows import is_row_kernel

# Anchors that write a value per element of their input (the rest write one per output).
FULL = frozenset({"softmax", "log_softmax", "layer_norm", "group_norm", "instance_norm"})

REDUCE_PRELUDE = r"""
// Block reductions over the threads that share an output: `ty` in the low bits of threadIdx.x
// (RM: one row's threads side by side) or in the high bits (inner-dim columns side by side).
template <int OP> __device__ __forceinline__ float tw_comb(float a, float b) {
  return OP == 0 ? a + b : OP == 1 ? tw_max(a, b) : OP == 2 ? tw_min(a, b) : a * b;
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
// Two (max, sum of exp) pairs as one, by the same rule.
__device__ __forceinline__ void tw_merge(float& m, float& s, float m2, float s2) {
  if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }
  else if (m2 == m) { s += s2; }
  else { s += s2 * expf(m2 - m); }
}
// PyTorch's arg-max/min order: NaN wins, then the larger (smaller) value, ties to the lower index.
template <bool MAX> __device__ __forceinline__ bool tw_better(float a, int ia, float b, int ib) {
  if (a != a) return b != b ? ia < ib : true;
  if (b != b) return false;
  return a == b ? ia < ib : (MAX ? a > b : a < b);
}
template <bool MAX, int NT, int TX, int TY, bool RM>
__device__ __forceinline__ void tw_block_argreduce(float& v, int& ix) {
  __shared__ float sv[NT];
  __shared__ int si[NT];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (RM) {
#pragma unroll
    for (int o = (TY < 32 ? TY : 32) / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, ix, o);
      if (tw_better<MAX>(ov, oi, v, ix)) { v = ov; ix = oi; }
    }
    if (TY <= 32) return;
    constexpr int WPR = TY > 32 ? TY / 32 : 1;
    __syncthreads();
    if (lane == 0) { sv[warp] = v; si[warp] = ix; }
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    v = sv[first]; ix = si[first];
#pragma unroll
    for (int k = 1; k < WPR; ++k) if (tw_better<MAX>(sv[first + k], si[first + k], v, ix)) { v = sv[first + k]; ix = si[first + k]; }
  } else {
#pragma unroll
    for (int o = 16; o >= TX; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, ix, o);
      if (tw_better<MAX>(ov, oi, v, ix)) { v = ov; ix = oi; }
    }
    constexpr int NW = NT / 32;
    if (NW == 1) return;
    __syncthreads();
    if (lane < TX) { sv[warp * 32 + lane] = v; si[warp * 32 + lane] = ix; }
    __syncthreads();
    const int tx = lane % TX;
    v = sv[tx]; ix = si[tx];
#pragma unroll
    for (int k = 1; k < NW; ++k) if (tw_better<MAX>(sv[k * 32 + tx], si[k * 32 + tx], v, ix)) { v = sv[k * 32 + tx]; ix = si[k * 32 + tx]; }
  }
}
"""


class _Stage:
    """CUDA lines computing some members at one element, loading the tensors they read.

    Names in `vec` are full-size contiguous inputs: inside a vector loop they come from
    `r_<name>.v[e]`, loaded 16 bytes at a time before it.
    """

    def __init__(self, kernel: Kernel, nodes: dict[str, Node], itype: str, vec: frozenset = frozenset()):
        self.kernel, self.nodes, self.itype, self.vec = kernel, nodes, itype, vec
        self.inputs = set(kernel.inputs)

    def load(self, name: str, shape: tuple, idx: str, vec: bool = False) -> str:
        if vec and name in self.vec:
            return f"const auto {name} = tw_ld(r_{name}.v[e]);"
        n = self.nodes[name]
        dims = coalesce(tuple(shape), [(n.shape, n.stride)])[0]
        return f"const auto {name} = tw_ld(in_{name}[{index_expr(dims, idx, self.itype)}]);"

    def lines(self, members: list[str], shape: tuple, idx: str, extra: tuple = (), vec: bool = False,
              have: frozenset = frozenset()) -> list[str]:
        """`have`: tensors already in variables of their name (loads skipped)."""
        out, loaded = [], set(have)
        for m in list(members) + list(extra):
            refs = [m] if m in extra else self.nodes[m].inputs()
            for r in refs:
                if r in self.inputs and r not in loaded:
                    loaded.add(r)
                    out.append(self.load(r, shape, idx, vec))
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
    return lit(a, "bool" if isinstance(a, bool) else ("double" if ctype == "double" else "float"))


@dataclass(frozen=True)
class Launch:
    """What the Python wrapper must provide: a workspace (floats) and the vector build's alignment."""

    workspace: int
    vec: int  # 1: no vector build
    aligned: tuple[tuple[str, int], ...]  # (input or output name, bytes) that the vector build needs


class _Gen:
    """One reduce anchor with its prologue and epilogue, and the layout it runs in."""

    def __init__(self, k: Kernel, nodes: dict[str, Node]):
        self.k, self.nodes = k, nodes
        self.a = a = nodes[k.anchor]
        self.O, self.R, self.I = reduce_geometry(a, k.shape)
        members = set(k.nodes)
        pro_set = ancestors_in(k.anchor, members, nodes)
        self.pro = [m for m in k.nodes if m in pro_set]
        self.aux = [m for m in k.nodes if nodes[m].op == "reduce_aux"]
        self.epi = [m for m in k.nodes if m not in pro_set and m != k.anchor and m not in self.aux]
        self.x = a.args[0]
        self.full = a.op in FULL
        self.rows = False  # reduce_rows.RowGen: a reduction whose kernel also writes per element
        self.itype = "ull" if prod(k.shape) >= 2**31 else "u"
        self.IT = "unsigned long long" if self.itype == "ull" else "unsigned int"
        self.fullsize = [i for i in k.inputs if tuple(nodes[i].shape) == tuple(k.shape) and is_contiguous(nodes[i])]
        self.L = self.choose_layout(pro_set)
        lay = self.L
        self.st = _Stage(k, nodes, self.itype, frozenset(self.fullsize) if lay.rm else frozenset())
        self.stats = Stats(a, self.R)
        self.red = f"{lay.nt}, {lay.tx}, {lay.ty}, {'true' if lay.rm else 'false'}"
        self.nout = self.O * self.I
        tracked = a.op == "instance_norm" and isinstance(a.args[3], Ref)
        self.mutable = (a.args[3], a.args[4]) if tracked else ()

    def written(self) -> list[str]:
        """Outputs with a value per element of the input, stored as vectors by the write loop."""
        return list(self.k.outputs) if self.full else []

    def choose_layout(self, pro_set: set) -> Layout:
        nodes = self.nodes
        widths = [ITEMSIZE[nodes[n].dtype] for n in self.fullsize + self.written()]
        # NOTE: the register cache holds only x: an epilogue reading another prologue value re-reads.
        epi_reads = {r for m in self.epi for r in nodes[m].inputs()}
        cacheable = not (epi_reads & (pro_set - {self.x}))
        two_pass = self.full or self.a.op in ("var", "std")
        lay = layout(self.O, self.R, self.I, 16 // max(widths) if widths else 1, two_pass)
        return replace(lay, cache=False) if lay.cache and not cacheable else lay

    # --- pieces -------------------------------------------------------------------------------

    def head(self, split_block: bool) -> list[str]:
        """Thread coordinates: output (o, i), the thread's place `ty` among its TY, the chunk [c0, c1)."""
        L, IT, it = self.L, self.IT, self.itype
        blk = f"blockIdx.x / {L.split}u" if L.split > 1 else "blockIdx.x"
        B = ["  const unsigned t = threadIdx.x;"]
        if L.rm:
            B += [f"  const unsigned ty = t % {L.ty}u;",
                  f"  const {IT} o = ({IT})({blk}) * {L.tx}{it} + t / {L.ty}u, i = 0;",
                  f"  const bool live = o < {self.O}{it};"]
        else:
            tiles = -(-self.I // L.tx)
            B += [f"  const unsigned ty = t / {L.tx}u, bo = {blk};",
                  f"  const {IT} o = bo / {tiles}u, i = ({IT})(bo % {tiles}u) * {L.tx}{it} + t % {L.tx}u;",
                  f"  const bool live = i < {self.I}{it};"]
        B.append(f"  const {IT} base = o * {self.R * self.I}{it} + i;")
        if L.split > 1 and split_block:
            B.append(f"  const unsigned c0 = (blockIdx.x % {L.split}u) * {L.chunk}u, "
                     f"c1 = c0 + {L.chunk}u < {self.R}u ? c0 + {L.chunk}u : {self.R}u;")
        else:
            B.append(f"  const unsigned c0 = 0u, c1 = {self.R}u;")
        return B

    def loop(self, body: list[str], unroll: str, stores: list[str] = ()) -> list[str]:
        """body for every element of this thread's chunk; `stores`: outputs written as vectors."""
        L, IT, it = self.L, self.IT, self.itype
        step = "(j * {ty}u + ty) * V" if L.rm else "j * {ty}u + ty"
        out = [f"#pragma unroll{unroll}", "  for (unsigned j = 0; j < PER; ++j) {",
               f"    const unsigned r0 = c0 + {step.format(ty=L.ty)};",
               "    if (live && r0 < c1) {",
               f"      const {IT} i0 = base + ({IT})r0{f' * {self.I}{it}' if self.I > 1 else ''};"]
        used = [n for n in self.st.vec if any(f"r_{n}.v[e]" in b for b in body)]
        for n in sorted(used):
            s = STORAGE[self.nodes[n].dtype]
            out.append(f"      const tw_vec<{s}, V> r_{n} = *reinterpret_cast<const tw_vec<{s}, V>*>(in_{n} + i0);")
        for o in stores:
            out.append(f"      tw_vec<{STORAGE[self.nodes[o].dtype]}, V> w_{o};")
        out += ["#pragma unroll", "      for (int e = 0; e < V; ++e) {",
                f"        const unsigned r = r0 + e; const {IT} idx = i0 + e; (void)r; (void)idx;"]
        out += ["        " + b for b in body] + ["      }"]
        for o in stores:
            s = STORAGE[self.nodes[o].dtype]
            out.append(f"      *reinterpret_cast<tw_vec<{s}, V>*>(out_{o} + i0) = w_{o};")
        return out + ["    }", "  }"]

    def first_value(self) -> list[str]:
        """K: the output's first element (the shift of the moments' sums), in every thread."""
        x_extra = (self.x,) if self.x in self.st.inputs else ()
        return (["  float K = 0.0f;", f"  if (live) {{ const {self.IT} idx = base;"]
                + ["    " + b for b in self.st.lines(self.pro, self.k.shape, "idx", x_extra)] + [f"    K = {self.x}; }}"])

    def element(self, vec: bool = True) -> list[str]:
        x_extra = (self.x,) if self.x in self.st.inputs else ()
        return self.st.lines(self.pro, self.k.shape, "idx", x_extra, vec)

    def accumulate(self) -> list[str]:
        """Declare and fill the statistics over this thread's chunk, then combine the block's threads."""
        L, s = self.L, self.stats
        B = s.decl()
        cached = L.cache
        if s.kind == "moments" and not cached:
            B += self.first_value()
        if cached:
            B.append("  float cx[PER * V];")
            B += self.loop(self.element() + [f"cx[j * V + e] = {self.x};"] + s.update(self.x, True), "")
        else:
            B += self.loop(self.element() + s.update(self.x), " 4")
        B += s.block(self.red, cached)
        return B

    def finish_moments(self) -> list[str]:
        B = self.stats.moments(self.L.cache)
        if self.L.cache:  # an exact second pass over the registers
            B += ["  float q = 0.0f;"]
            B += self.loop(["const float d = cx[j * V + e] - mean;", "q = fmaf(d, d, q);"], "")
            B += [f"  const float m2 = tw_block_reduce<0, {self.red}>(q);"]
        return B

    def stats_ready(self) -> list[str]:
        """From combined statistics to what the write or the final value needs."""
        a, op = self.a, self.a.op
        if self.stats.kind == "moments":
            B = self.finish_moments()
            if self.full:
                B.append(f"  const float rstd = rsqrtf(m2 * {lit(1.0 / self.R, 'float')} + {lit(a.attr('eps'), 'float')});")
            if self.mutable:  # NOTE: as batch norm: biased variance normalises, the unbiased one is kept
                rm, rv = self.mutable
                f = lambda v: lit(v, "float")  # noqa: E731
                mom, first = a.attr("momentum"), " && blockIdx.x % {}u == 0".format(self.L.split) if self.L.split > 1 else ""
                B += [f"  if (live && ty == 0{first}) {{",
                      f"    in_{rm}[o] = {f(1 - mom)} * in_{rm}[o] + {f(mom)} * mean;",
                      f"    in_{rv}[o] = {f(1 - mom)} * in_{rv}[o] + {f(mom)} * (m2 / {f(max(self.R - 1, 1))});", "  }"]
            return B
        if op == "softmax":
            return ["  const float Sd = isinf(M) ? NAN : S;"]
        if op == "log_softmax":
            return ["  const float L = isinf(M) ? NAN : logf(S);"]
        return []

    def write(self) -> list[str]:
        """softmax and norms: every element through the anchor and the epilogue, stored as vectors."""
        a, op, x = self.a, self.a.op, self.x
        if op == "softmax":
            expr = f"expf({x} - M) / Sd"
        elif op == "log_softmax":
            expr = f"({x} - M) - L"
        else:
            expr = f"({x} - mean) * rstd"
            chan = ("r" if op == "layer_norm" else _group_channel(a, self.k.shape) if op == "group_norm"
                    else f"(unsigned)(o % {self.k.shape[1]}u)")
            for arg, fmt in ((a.args[1], "{e} * tw_ld(in_{w}[{c}])"), (a.args[2], "{e} + tw_ld(in_{w}[{c}])")):
                if isinstance(arg, Ref):
                    expr = fmt.format(e=f"({expr})", w=arg, c=chan)
        body = [f"const float {x} = cx[j * V + e];"] if self.L.cache else self.element()
        body += [f"const float {a.name} = {expr};"] + self.st.lines(self.epi, self.k.shape, "idx", vec=True)
        body += [f"w_{o}.v[e] = tw_st<{STORAGE[self.nodes[o].dtype]}>({o});" for o in self.k.outputs]
        return self.loop(_dedupe_loads(body), "" if self.L.cache else " 4", list(self.k.outputs))

    def results(self, oi: str, cond: str) -> list[str]:
        """A reduction's value, its companions and epilogue at output `oi`, stored by one thread."""
        a, nodes = self.a, self.nodes
        B = [f"  if ({cond}) {{", f"    const {self.IT} oi = {oi};"]
        ctype = "long long" if a.dtype == "int64" else "float"
        B.append(f"    const {ctype} {a.name} = {self.stats.value()};")
        for m in self.aux:
            what = nodes[m].attr("what")
            # NOTE: eager's Welford mean is NaN once an inf meets another value, as the variance is
            val = {"max": "v", "min": "v", "mean": "m2 != m2 ? m2 : mean"}[what]
            B.append(f"    const float {m} = {val};")
        B += ["    " + b for b in self.st.lines(self.epi, a.shape, "oi")]
        for o in self.k.outputs:
            dt = nodes[o].dtype
            B.append(f"    out_{o}[oi] = {o};" if dt == "int64" else f"    out_{o}[oi] = tw_st<{STORAGE[dt]}>({o});")
        return B + ["  }"]

    # --- kernels ------------------------------------------------------------------------------

    def kernel(self, name: str, body: list[str], nt: int, templated: bool = True, ws: bool = False) -> str:
        kparams, _, _ = params(self.k, self.nodes, self.mutable)
        if ws:
            kparams += ", float* __restrict__ ws"
        head = "template <int V>\n" if templated else ""
        pre = [f"  constexpr unsigned PER = ({self.L.chunk}u + {self.L.ty}u * V - 1) / ({self.L.ty}u * V);"] if templated else []
        return "\n".join([f"{head}__global__ void __launch_bounds__({nt}) {name}({kparams}) {{"] + pre + body + ["}", ""])

    def main(self) -> str:
        """Unsplit: statistics, then the write (softmax, norms) or the value (reductions)."""
        B = self.head(False) + self.accumulate() + self.stats_ready()
        if self.full:
            B += self.write()
        else:
            B += self.results("o * {I}{it} + i".format(I=self.I, it=self.itype), "live && ty == 0")
        return self.kernel(self.k.name, B, self.L.nt)

    def part(self) -> str:
        """Split, first kernel: this chunk's partial statistics into the workspace."""
        L, n = self.L, self.nout * self.L.split
        slot = f"(o * {self.I}{self.itype} + i) * {L.split}u + blockIdx.x % {L.split}u"
        B = self.head(True) + self.accumulate()
        B += ["  if (live && ty == 0) {"] + ["    " + s for s in self.stats.store(slot, n)] + ["  }"]
        return self.kernel(self.k.name + "_part", B, L.nt, ws=True)

    def merge_lines(self, first: str, step: str, red: str) -> list[str]:
        L, n = self.L, self.nout * self.L.split
        s = self.stats
        B = s.decl() + [f"  if (live) for (unsigned c = {first}; c < {L.split}u; c += {step}) {{"]
        B += ["    " + m for m in s.merge(f"(o * {self.I}{self.itype} + i) * {L.split}u + c", n)] + ["  }"]
        saved = self.red
        self.red = red
        B += s.block(red)
        if s.kind == "moments":
            B += self.first_value()
        self.red = saved
        return B

    def fin(self) -> str:
        """Split, second kernel: merge the partials; write the chunk (softmax, norms) or the value."""
        L, IT, it = self.L, self.IT, self.itype
        if self.full:
            B = self.head(True) + self.merge_lines("ty", f"{L.ty}u", self.red) + self.stats_ready() + self.write()
            return self.kernel(self.k.name + "_fin", B, L.nt, ws=True)
        B = ["  const unsigned t = threadIdx.x, lane = t & 31;",
             f"  const {IT} oi0 = ({IT})blockIdx.x * 8{it} + t / 32u;",
             f"  const bool live = oi0 < {self.nout}{it};",
             f"  const {IT} o = oi0 / {self.I}{it}, i = oi0 % {self.I}{it};",
             f"  const {IT} base = o * {self.R * self.I}{it} + i;"]
        B += self.merge_lines("lane", "32u", "256, 8, 32, true") + self.stats_ready()
        B += self.results("oi0", "live && lane == 0")
        return self.kernel(self.k.name + "_fin", B, 256, templated=False, ws=True)

    def launch(self) -> Launch:
        L = self.L
        aligned = ()
        if L.vec > 1:
            names = list(self.fullsize) + self.written()
            aligned = tuple((n, ITEMSIZE[self.nodes[n].dtype] * L.vec) for n in names)
        ws = self.nout * L.split * nstats(self.a.op) if L.split > 1 else 0
        return Launch(ws, L.vec, aligned)

    def source(self) -> str:
        L = self.L
        kernels = [self.main()] if L.split == 1 else [self.part(), self.fin()]
        _, lparams, casts = params(self.k, self.nodes, self.mutable)
        if L.split > 1:
            lparams += ", void* ws"
            casts += ", (float*)ws"
        lines = [f'extern "C" int tw_launch_{self.k.name}({lparams}, int vec, void* stream) {{',
                 "  cudaStream_t st = (cudaStream_t)stream;", "  (void)vec;"]

        def go(name: str, blocks: int, nt: int, templated: bool = True) -> None:
            if not templated:
                lines.append(f"  {name}<<<{blocks}u, {nt}, 0, st>>>({casts});")
            elif L.vec > 1:
                lines.append(f"  if (vec) {name}<{L.vec}><<<{blocks}u, {nt}, 0, st>>>({casts});")
                lines.append(f"  else {name}<1><<<{blocks}u, {nt}, 0, st>>>({casts});")
            else:
                lines.append(f"  {name}<1><<<{blocks}u, {nt}, 0, st>>>({casts});")

        if L.split == 1:
            go(self.k.name, L.blocks, L.nt)
        else:
            go(self.k.name + "_part", L.blocks, L.nt)
            if self.full or self.rows:
                go(self.k.name + "_fin", L.blocks, L.nt)
            else:
                go(self.k.name + "_fin", -(-self.nout // 8), 256, templated=False)
        lines += ["  return (int)cudaGetLastError();", "}", ""]
        return "\n".join(kernels + lines)


def reduce_source(k: Kernel, graph) -> str:
    """One reduce kernel (two where the output is split) and its `extern "C"` launcher."""
    nodes = graph.by_name()
    a = nodes[k.anchor]
    if a.op == "batch_norm":
        from torchweld.codegen.batchnorm import batch_norm_source

        return _header(k, nodes) + batch_norm_source(k, nodes)
    if a.op == "cumsum":
        from torchweld.codegen.scan import scan_source

        return _header(k, nodes) + scan_source(k, nodes)
    return _header(k, nodes) + generator(k, nodes).source()


def generator(k: Kernel, nodes: dict[str, Node]) -> "_Gen":
    """The code generator of a reduce kernel: a row kernel (reduce_rows.py) or one anchor's."""
    from torchweld.codegen.reduce_rows import RowGen  # NOTE: here: it subclasses _Gen

    return RowGen(k, nodes) if is_row_kernel(list(k.nodes), nodes) else _Gen(k, nodes)


def reduce_launch(k: Kernel, graph) -> Launch:
    """The workspace and vector alignment a reduce kernel's wrapper must provide."""
    nodes = graph.by_name()
    if nodes[k.anchor].op in ("batch_norm", "cumsum"):
        return Launch(0, 1, ())
    return generator(k, nodes).launch()


def reduce_traffic(k: Kernel, graph) -> str:
    """How the kernel reads its input, for the emitted file's header."""
    nodes = graph.by_name()
    a = nodes[k.anchor]
    if a.op in ("batch_norm",):
        return "two reads, one write"
    if a.op == "cumsum":
        return "one pass"
    g = generator(k, nodes)
    if g.rows:
        return g.traffic()
    split = f", each output split over {g.L.split} blocks" if g.L.split > 1 else ""
    if not g.full:
        return "one pass" + split
    return ("one read (kept in registers), one write" if g.L.cache else "two reads, one write") + split


def _group_channel(a: Node, shape: tuple) -> str:
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
