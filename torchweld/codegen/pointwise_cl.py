"""The channels-last build of a pointwise kernel: operands from a channels-last convolution are
read along the channel dim (their innermost), the outputs written in the captured NCHW order, both
coalesced, through a tile in shared memory.

The iteration space is seen as [O, C, P] (P: the spatial dims flattened). A block owns one outer
index o, TC channels and TP positions. It first loads each staged operand's TC x TP tile, channel
fastest (`VL` elements a load where the strides allow 16 bytes), into shared memory as compute
type; then each thread takes `VS` consecutive positions of one channel, reads the staged values
from the tile and the other operands as the flat build does (their captured strides: a bias, a
residual in NCHW), and writes `VS` outputs with one store.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from torchweld.codegen.common import (ITEMSIZE, STORAGE, THREADS, compute, compute_type, header, in_ptr, index_expr,
                                      iteration,
                                      operands, params, reach, variant_name, vec_class)
from torchweld.ir import Graph, Kernel
from torchweld.tiling import ChannelsLastTile, channels_last_tile


def variant_aligned(k: Kernel, graph: Graph, strides: dict[str, tuple]) -> list[tuple[str, int]] | None:
    """(operand, bytes) the vector build of `<kernel>_cl` needs aligned; None: it has no vector build."""
    if k.kind != "pointwise":
        return None
    t = channels_last_tile(k, graph, strides)
    if max(t.vl, t.vs) == 1:
        return None
    nodes = graph.by_name()
    staged = [a for a, _, _ in t.staged]
    out = [(a, ITEMSIZE[nodes[a].dtype] * t.vl) for a in staged if t.vl > 1]
    out += [(o.name, ITEMSIZE[o.dtype] * t.vs) for o in operands(k, graph)
            if o.name not in staged and t.vs > 1 and vec_class(o, t.vs) in ("full", "contig")]
    return out


def source(k: Kernel, graph: Graph, strides: dict[str, tuple]) -> str:
    """The builds of `<kernel>_cl` for the operands in `strides` at those strides, and its launcher."""
    nodes = graph.by_name()
    name = variant_name(k)
    t = channels_last_tile(k, graph, strides)
    ops = operands(k, graph)
    big = max([prod(k.shape)] + [reach(nodes[o.name]) for o in ops] + [reach(nodes[a], s) for a, s in strides.items()])
    itype = "u" if big < 2**31 else "ull"
    it = "unsigned int" if itype == "u" else "unsigned long long"
    builds = sorted({(1, 1), (t.vl, t.vs)})
    body = [_build(k, nodes, ops, t, vl, vs, f"{name}_v{max(vl, vs)}", itype, it) for vl, vs in builds]
    _, ptrs, casts = params(k, nodes)
    # NOTE: a runtime batch is the outer index O alone (no index takes it modulo): it sets the block count
    count = ", unsigned long long n" if k.batch else ""
    blocks = (f"(unsigned)(n / {t.C * t.P}ull) * {t.blocks // t.O}u" if k.batch else f"{t.blocks}u")
    launch = [f'extern "C" int tw_launch_{name}({ptrs}{count}, int vec, void* stream) {{',
              "  cudaStream_t s = (cudaStream_t)stream;"]
    calls = [f"{name}_v{max(vl, vs)}<<<{blocks}, {THREADS}, 0, s>>>({casts});" for vl, vs in builds]
    launch += [f"  if (vec) {calls[1]}", f"  else {calls[0]}"] if len(calls) > 1 else ["  (void)vec;", f"  {calls[0]}"]
    launch += ["  return (int)cudaGetLastError();", "}\n"]
    head = header(replace(k, name=name), nodes,
                  f"the channels-last build of {k.name}; fuses {len(k.nodes)} ops over "
                  + iteration(k))
    return head + "\n".join(body) + "\n".join(launch)


def _build(k: Kernel, nodes, ops, t: ChannelsLastTile, vl: int, vs: int, fname: str, itype: str, it: str) -> str:
    staged = {a: (so, sp) for a, so, sp in t.staged}
    p_tiles, c_tiles = -(-t.P // t.tp), -(-t.C // t.tc)
    lines = [f"__global__ void __launch_bounds__({THREADS}) {fname}({params(k, nodes)[0]}) {{"]
    lines += [f"  __shared__ {compute_type(nodes[a].dtype)} s_{a}[{t.tc}][{t.tp + 1}];" for a in staged]
    lines += [f"  const {it} q_p = ({it})(blockIdx.x % {p_tiles}u) * {t.tp}{itype};",
              f"  const {it} q_c = ({it})((blockIdx.x / {p_tiles}u) % {c_tiles}u) * {t.tc}{itype};",
              f"  const {it} q_o = ({it})(blockIdx.x / {p_tiles * c_tiles}u);",
              "  // 1. staged operands, channel fastest"]
    per = t.tc // vl
    passes = -(-per * t.tp // THREADS)
    lines += ["#pragma unroll", f"  for (int r = 0; r < {passes}; ++r) {{",
              f"    const int e = r * {THREADS} + (int)threadIdx.x, cl = (e % {per}){f' * {vl}' if vl > 1 else ''}, pl = e / {per};",
              f"    const {it} c = q_c + cl, p = q_p + pl;",
              f"    if ({'pl < ' + str(t.tp) + ' && ' if passes * THREADS > per * t.tp else ''}c < {t.C}{itype} && p < {t.P}{itype}) {{"]
    for a, (so, sp) in staged.items():
        at = " + ".join(([f"q_o * {so}{itype}"] if so else []) + ["c"] + [f"p * {sp}{itype}" if sp != 1 else "p"])
        s = STORAGE[nodes[a].dtype]
        if vl > 1:
            lines += [f"      const tw_vec<{s}, {vl}> r_{a} = *reinterpret_cast<const tw_vec<{s}, {vl}>*>({in_ptr(a)} + {at});",
                      "#pragma unroll", f"      for (int j = 0; j < {vl}; ++j) s_{a}[cl + j][pl] = tw_ld(r_{a}.v[j]);"]
        else:
            lines.append(f"      s_{a}[cl][pl] = tw_ld({in_ptr(a)}[{at}]);")
    lines += ["    }", "  }", "  __syncthreads();", "  // 2. outputs, position fastest"]
    per = t.tp // vs
    passes = -(-per * t.tc // THREADS)
    lines += ["#pragma unroll", f"  for (int r = 0; r < {passes}; ++r) {{",
              f"    const int e = r * {THREADS} + (int)threadIdx.x, pl = (e % {per}){f' * {vs}' if vs > 1 else ''}, cl = e / {per};",
              f"    const {it} c = q_c + cl, p0 = q_p + pl;",
              f"    if ({'cl < ' + str(t.tc) + ' && ' if passes * THREADS > per * t.tc else ''}c < {t.C}{itype} && p0 < {t.P}{itype}) {{",
              f"      const {it} i0 = (q_o * {t.C}{itype} + c) * {t.P}{itype} + p0;"]
    classes = {o.name: "staged" if o.name in staged else vec_class(o, vs) if vs > 1 else "gather" for o in ops}
    for o in ops:
        s, cls, c = STORAGE[o.dtype], classes[o.name], in_ptr(o.name)
        if cls in ("full", "contig"):
            at = "i0" if cls == "full" else index_expr(o.dims, "i0", itype)
            lines.append(f"      const tw_vec<{s}, {vs}> r_{o.name} = *reinterpret_cast<const tw_vec<{s}, {vs}>*>({c} + {at});")
        elif cls == "uniform":
            lines.append(f"      const auto r_{o.name} = tw_ld({c}[{index_expr(o.dims, 'i0', itype)}]);")
    lines += [f"      tw_vec<{STORAGE[nodes[out].dtype]}, {vs}> w_{out};" for out in k.outputs]
    lines += ["#pragma unroll", f"      for (int j = 0; j < {vs}; ++j) {{",
              f"        const {it} i = i0 + j;" if "gather" in classes.values() else "        (void)0;"]
    for o in ops:
        ld = {"staged": f"s_{o.name}[cl][pl + j]", "full": f"tw_ld(r_{o.name}.v[j])",
              "contig": f"tw_ld(r_{o.name}.v[j])", "uniform": f"r_{o.name}",
              "gather": f"tw_ld({in_ptr(o.name)}[{index_expr(o.dims, 'i', itype)}])"}[classes[o.name]]
        lines.append(f"        const auto {o.name} = {ld};")
    lines += ["        " + compute(nodes[m]) for m in k.nodes]
    lines += [f"        w_{out}.v[j] = tw_st<{STORAGE[nodes[out].dtype]}>({out});" for out in k.outputs]
    lines.append("      }")
    lines += [f"      *reinterpret_cast<tw_vec<{STORAGE[nodes[out].dtype]}, {vs}>*>(out_{out} + i0) = w_{out};"
              for out in k.outputs]
    lines += ["    }", "  }", "}\n"]
    return "\n".join(lines)
