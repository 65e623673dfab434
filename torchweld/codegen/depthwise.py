"""CUDA source for depthwise convolutions (one input channel per group) with a fused epilogue.

A block computes a tile of output rows x columns of one (n, c) plane, or several whole small
planes. It first reads the input tile and its halo into shared memory once, as floats, zero where
the window falls outside the input (the padding), with the weights and bias of its channels; then
each thread computes VH rows x VW consecutive columns of outputs. With few taps (`regs`) the
channel's weights sit in registers and a thread streams the input rows it needs, each row segment
read once (16-byte loads where aligned) and used for every output row it touches. Larger kernels
read weights and inputs from shared memory per tap. Taps accumulate in fp32 in ATen's order
(bias, then kh, then kw); the pointwise epilogue runs on the accumulator before the single store.

The two phases are device functions (`<k>_load`, `<k>_compute`) that the kernel calls around one
`__syncthreads()`: the tests compile them for the host and run every thread of every block.
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.codegen.common import (STORAGE, PointwiseLines, anchored_header, batch_params, blocks_of,
                                      kernel_with_launcher, outer, params)
from torchweld.ir import Graph, Kernel, Node
from torchweld.tiling import Geometry, Tiling, cdiv, geometry, smem_bytes, tiling


def depthwise_parts(k: Kernel, graph) -> tuple[str, str, Geometry, Tiling]:
    """(the two phases as device functions, the kernel and its launcher, geometry, tiling)."""
    nodes = graph.by_name()
    a = nodes[k.anchor]
    x, w, b = a.args
    g = geometry(a, nodes)
    t = tiling(g)
    KK, WN, TILE = g.KH * g.KW, g.M * (g.KH * g.KW + 1), t.tile
    planes = g.N * g.C
    itype = "ull" if max(planes * g.H * g.W, planes * g.M * g.OH * g.OW) >= 2**31 else "u"
    IT = "unsigned long long" if itype == "ull" else "unsigned int"
    tiles = t.tiles_h * t.tiles_w
    # NOTE: the wrapper hands the kernel its input and weight contiguous, whatever their captured strides.
    flat = {n: replace(nodes[n], stride=()) for n in (x, w)}
    pw = PointwiseLines(k, {**nodes, **flat}, itype)
    kparams = params(k, nodes)[0] + batch_params(k)[0]
    # NOTE: a runtime batch scales the planes alone (n outermost): every test against their count is kept
    last = outer(k, planes, itype)
    sig = f"{kparams}, {{smem}}float* __restrict__ sm, const unsigned blk, const unsigned t"

    load = [f"__device__ __forceinline__ void {k.name}_load({sig.format(smem='')}) {{",
            "  // The input tile and its halo (zero outside the input), then the planes' weights and biases.",
            f"  const unsigned tile = blk % {tiles}u;",
            f"  const {IT} p0 = ({IT})(blk / {tiles}u) * {t.PB}{itype};",
            f"  const int ih0 = (int)(tile / {t.tiles_w}u) * {t.TY * t.VH * g.SH} + {-g.PH}, "
            f"iw0 = (int)(tile % {t.tiles_w}u) * {t.TX * t.VW * g.SW} + {-g.PW};"]
    iters = cdiv(t.PB * TILE, t.threads)
    ch = min(iters, 16)  # NOTE: loads in batches, then their stores: a batch's loads are in flight at once
    total = t.PB * TILE
    whole = cdiv(iters, ch) * ch * t.threads == total
    inside = ([] if whole else [f"i < {total}"]) + [f"(unsigned)ih < {g.H}u", f"(unsigned)iw < {g.W}u"] + (
        [f"p0 + pl < {last}"] if (planes // k.batch if k.batch else planes) % t.PB else [])
    load += ["#pragma unroll 1", f"  for (int j0 = 0; j0 < {iters}; j0 += {ch}) {{",
             f"    float v[{ch}];", "#pragma unroll", f"    for (int j = 0; j < {ch}; ++j) {{",
             f"      const int i = (int)t + (j0 + j) * {t.threads};",
             f"      const int pl = i / {TILE}, r = i % {TILE} / {t.IWP}, c = i % {t.IWP};" if t.PB > 1 else
             f"      const int pl = 0, r = i / {t.IWP}, c = i % {t.IWP};",
             "      const int ih = ih0 + r, iw = iw0 + c;",
             "      v[j] = 0.0f;",
             f"      if ({' && '.join(inside)}) v[j] = tw_ld(in_{x}[(p0 + pl) * {g.H * g.W}{itype} + ({IT})(ih * {g.W} + iw)]);",
             "    }", "#pragma unroll", f"    for (int j = 0; j < {ch}; ++j) {{",
             f"      const int i = (int)t + (j0 + j) * {t.threads};",
             "      sm[i] = v[j];" if whole else f"      if (i < {total}) sm[i] = v[j];",
             "    }", "  }",
             f"  for (int i = (int)t; i < {t.PB * WN}; i += {t.threads}) {{",
             f"    const int pl = i / {WN}, j = i % {WN};",
             f"    const {IT} p = p0 + pl;",
             f"    const unsigned c = (unsigned)(p % {g.C}{itype});",
             "    float v = 0.0f;",
             f"    if (j < {g.M * KK}) v = tw_ld(in_{w}[c * {g.M * KK}u + j]);"]
    if b is not None:
        load.append(f"    else v = tw_ld(in_{b}[c * {g.M}u + (j - {g.M * KK})]);")
    load += [f"    sm[{t.PB * TILE} + i] = p < {last} ? v : 0.0f;", "  }", "}", ""]

    comp = [f"__device__ __forceinline__ void {k.name}_compute({sig.format(smem='const ')}) {{",
            f"  // Outputs rows oh0 + [0, {t.VH}) x columns ow0 + [0, {t.VW}) of plane p, for each of its {g.M} channel(s).",
            f"  const unsigned tile = blk % {tiles}u;",
            f"  const int pl = (int)t / {t.TX * t.TY}, ty = (int)t % {t.TX * t.TY} / {t.TX}, tx = (int)t % {t.TX};",
            f"  const {IT} p = ({IT})(blk / {tiles}u) * {t.PB}{itype} + pl;",
            f"  const int oh0 = (int)(tile / {t.tiles_w}u) * {t.TY * t.VH} + ty * {t.VH}, "
            f"ow0 = (int)(tile % {t.tiles_w}u) * {t.TX * t.VW} + tx * {t.VW};",
            f"  if (p >= {last} || oh0 >= {g.OH} || ow0 >= {g.OW}) return;",
            f"  const float* __restrict__ tl = sm + pl * {TILE} + ty * {t.VH * g.SH * t.IWP} + tx * {t.VW * g.SW};",
            f"  const float* __restrict__ wb = sm + {t.PB * TILE} + pl * {WN};",
            "#pragma unroll 1",
            f"  for (int m = 0; m < {g.M}; ++m) {{",
            f"    float acc[{t.VH}][{t.VW}];",
            _unroll(t.VH, 4), f"    for (int a = 0; a < {t.VH}; ++a)",
            _unroll(t.VW, 4), f"      for (int b = 0; b < {t.VW}; ++b) acc[a][b] = wb[{g.M * KK} + m];"]
    comp += _taps_regs(g, t) if t.regs else _taps_smem(g, t)
    comp += _epilogue(k, nodes, pw, a, g, t, IT, itype) + ["  }", "}", ""]

    args = ", ".join([f"in_{n}" for n in k.inputs] + [f"out_{o}" for o in k.outputs] + ["nb"] * bool(k.batch))
    body = [f"  __shared__ __align__(16) float sm[{smem_bytes(g, t) // 4}];",
            f"  {k.name}_load({args}, sm, blockIdx.x, threadIdx.x);",
            "  __syncthreads();",
            f"  {k.name}_compute({args}, sm, blockIdx.x, threadIdx.x);"]
    blocks = blocks_of(k, planes, t.PB, tiles) if k.batch else cdiv(planes, t.PB) * tiles
    return "\n".join(load + comp), kernel_with_launcher(k, nodes, body, t.threads, blocks), g, t


def _unroll(n: int, full: int = 32) -> str:
    return "#pragma unroll" if n <= full else "#pragma unroll 8"


def _taps_regs(g: Geometry, t: Tiling) -> list[str]:
    """Weights in registers; each of the RH input rows read once into registers (as 16-byte vectors
    where aligned) and used for every output row a < VH it touches: kh = (r - a*SH) / DH."""
    KK = g.KH * g.KW
    if t.vec:
        seg = [f"      tw_vec<float, 4> s[{t.LS // 4}];", _unroll(t.LS // 4),
               f"      for (int q = 0; q < {t.LS // 4}; ++q)",
               f"        s[q] = *reinterpret_cast<const tw_vec<float, 4>*>(tl + r * {t.IWP} + 4 * q);"]
        tap = f"s[(b * {g.SW} + kw * {g.DW}) / 4].v[(b * {g.SW} + kw * {g.DW}) % 4]"
    else:
        seg = [f"      float s[{t.LS}];", _unroll(t.LS, 64),
               f"      for (int q = 0; q < {t.LS}; ++q) s[q] = tl[r * {t.IWP} + q];"]
        tap = f"s[b * {g.SW} + kw * {g.DW}]"
    return [f"    float wr[{KK}];", _unroll(KK, 64),
            f"    for (int q = 0; q < {KK}; ++q) wr[q] = wb[m * {KK} + q];",
            "#pragma unroll",
            f"    for (int r = 0; r < {t.RH}; ++r) {{", *seg,
            "#pragma unroll",
            f"      for (int a = 0; a < {t.VH}; ++a) {{",
            f"        const int d = r - a * {g.SH};",
            f"        if (d < 0 || d % {g.DH} != 0 || d / {g.DH} >= {g.KH}) continue;",
            "#pragma unroll",
            f"        for (int kw = 0; kw < {g.KW}; ++kw)",
            "#pragma unroll",
            f"          for (int b = 0; b < {t.VW}; ++b) acc[a][b] = fmaf(wr[d / {g.DH} * {g.KW} + kw], {tap}, acc[a][b]);",
            "      }", "    }"]


def _taps_smem(g: Geometry, t: Tiling) -> list[str]:
    """Large kernels: one row of outputs a thread; each tap's weight and inputs read from shared memory."""
    return ["#pragma unroll 1",
            f"    for (int kh = 0; kh < {g.KH}; ++kh) {{",
            f"      const float* __restrict__ row = tl + kh * {g.DH * t.IWP};",
            f"      const float* __restrict__ wk = wb + m * {g.KH * g.KW} + kh * {g.KW};",
            "#pragma unroll 4",
            f"      for (int kw = 0; kw < {g.KW}; ++kw) {{",
            "        const float wv = wk[kw];",
            "#pragma unroll",
            f"        for (int b = 0; b < {t.VW}; ++b) acc[0][b] = fmaf(wv, row[b * {g.SW} + kw * {g.DW}], acc[0][b]);",
            "      }", "    }"]


def _epilogue(k: Kernel, nodes, pw: PointwiseLines, a: Node, g: Geometry, t: Tiling, IT: str, itype: str) -> list[str]:
    """The epilogue at each output the thread computed, then the stores (vectors where a row of the
    thread's outputs is whole and aligned)."""
    members = [m for m in k.nodes if m != k.anchor]
    body = pw.lines(members, tuple(k.shape), "idx")
    x = a.args[0]
    # NOTE: the conv input read at the output's own index (a residual) is in the tile already when
    # the output grid is the input grid (stride 1, one channel each, output shape = input shape).
    if (g.SH, g.SW, g.M) == (1, 1, 1) and nodes[x].shape == a.shape and 0 <= g.PH <= (g.KH - 1) * g.DH \
            and 0 <= g.PW <= (g.KW - 1) * g.DW:
        body = [f"const float {x} = tl[(a + {g.PH}) * {t.IWP} + b + {g.PW}];" if line == pw.load(x, tuple(k.shape), "idx")
                else line for line in body]
    vector = g.OW % t.VW == 0 and t.VW > 1
    out = [f"    const {IT} ob = (p * {g.M}{itype} + ({IT})m) * {g.OH * g.OW}{itype};",
           "#pragma unroll", f"    for (int a = 0; a < {t.VH}; ++a) {{",
           "      const int oh = oh0 + a;"]
    if g.OH % t.VH:
        out.append(f"      if (oh >= {g.OH}) break;")
    stores = {o: STORAGE[nodes[o].dtype] for o in k.outputs}
    if vector:
        out += [f"      tw_vec<{s}, {t.VW}> w_{o};" for o, s in stores.items()]
    out += ["#pragma unroll", f"      for (int b = 0; b < {t.VW}; ++b) {{"]
    if not vector and g.OW % t.VW:
        out.append(f"        if (ow0 + b >= {g.OW}) break;")
    out += [f"        const {IT} idx = ob + ({IT})(oh * {g.OW} + ow0 + b);",
            f"        const float {a.name} = acc[a][b];", "        (void)idx;"]
    out += ["        " + line for line in body]
    out += [f"        w_{o}.v[b] = tw_st<{s}>({o});" if vector else f"        out_{o}[idx] = tw_st<{s}>({o});"
            for o, s in stores.items()]
    out.append("      }")
    if vector:
        out += [f"      *reinterpret_cast<tw_vec<{s}, {t.VW}>*>(out_{o} + ob + ({IT})(oh * {g.OW} + ow0)) = w_{o};"
                for o, s in stores.items()]
    out.append("    }")
    return out


def source(k: Kernel, graph: Graph) -> str:
    """One depthwise kernel (its two phases, the kernel, its `extern "C"` launcher)."""
    nodes = graph.by_name()
    device, kernel, g, t = depthwise_parts(k, graph)
    note = (f"// {g.KH}x{g.KW} depthwise, stride {g.SH}x{g.SW}, padding {g.PH}x{g.PW}, dilation {g.DH}x{g.DW}, "
            f"multiplier {g.M}: {g.H}x{g.W} -> {g.OH}x{g.OW}; block: {t.PB} plane(s) x {t.TY * t.VH}x{t.TX * t.VW} "
            f"outputs, {t.threads} threads of {t.VH}x{t.VW}, weights in {'registers' if t.regs else 'shared memory'}\n")
    return anchored_header(k, nodes) + note + device + "\n" + kernel
