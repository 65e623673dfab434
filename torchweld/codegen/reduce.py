"""CUDA source for reduce kernels: a reduction, softmax or norm with its prologue and epilogue.

The anchor's input is seen as [O, R, I] (reduce_geometry) and reduced over R; tiling.layout
says how threads cover it. Each thread accumulates in fp32 (reduce_stats.py), then a
warp-shuffle + shared-memory block reduction combines the threads of one output. The pointwise
prologue is recomputed on every read instead of being stored. Softmax and norms keep a thread's
elements in registers between their statistics and their write when they fit (one read), else
read twice. A split output runs two kernels: partial statistics per chunk into a workspace,
then one that merges them (and, for softmax and norms, writes its chunk). Kernels are templates
over the vector width V: the launcher takes V = 16 bytes where every full-size pointer is aligned.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod

from torchweld.codegen.common import (ITEMSIZE, STORAGE, Launch, PointwiseLines, anchored_header, batch_params,
                                      blocks_of, dedupe_loads, is_contiguous, outer, params, split_at_anchor)
from torchweld.codegen.ops import lit
from torchweld.codegen.reduce_stats import Stats, nstats
from torchweld.ir import AUX, Graph, Kernel, Node, Ref, reduce_geometry
from torchweld.tiling import Layout, layout

# Anchors that write a value per element of their input (the rest write one per output).
FULL = frozenset({"softmax", "log_softmax", "layer_norm", "group_norm", "instance_norm"})


class ReduceCode:
    """One reduce anchor with its prologue and epilogue, and the layout it runs in."""

    def __init__(self, k: Kernel, nodes: dict[str, Node]):
        self.k, self.nodes = k, nodes
        self.anchor = a = nodes[k.anchor]
        self.O, self.R, self.I = reduce_geometry(a, k.shape)
        self.prologue, after = split_at_anchor(k, nodes)
        self.aux = [m for m in after if nodes[m].op == AUX]  # the anchor's companions (a max's index...)
        self.epilogue = [m for m in after if m not in self.aux]
        self.x = a.args[0]
        self.full = a.op in FULL
        self.rows = False  # reduce_rows.RowCode: a reduction whose kernel also writes per element
        self.itype = "ull" if prod(k.shape) >= 2**31 else "u"
        self.IT = "unsigned long long" if self.itype == "ull" else "unsigned int"
        self.fullsize = [i for i in k.inputs if tuple(nodes[i].shape) == tuple(k.shape) and is_contiguous(nodes[i])]
        self.L = L = self.choose_layout()
        self.pw = PointwiseLines(k, nodes, self.itype, frozenset(self.fullsize) if L.rm else frozenset())
        self.stats = Stats(a, self.R)
        self.block_args = f"{L.nt}, {L.tx}, {L.ty}, {'true' if L.rm else 'false'}"
        self.nout = self.O * self.I
        tracked = a.op == "instance_norm" and isinstance(a.args[3], Ref)
        self.mutable = (a.args[3], a.args[4]) if tracked else ()

    def written(self) -> list[str]:
        """Outputs with a value per element of the input, stored as vectors by the write loop."""
        return list(self.k.outputs) if self.full else []

    def choose_layout(self) -> Layout:
        nodes = self.nodes
        widths = [ITEMSIZE[nodes[n].dtype] for n in self.fullsize + self.written()]
        # NOTE: the register cache holds only x: an epilogue reading another prologue value re-reads.
        epilogue_reads = {r for m in self.epilogue for r in nodes[m].inputs()}
        cacheable = not (epilogue_reads & (set(self.prologue) - {self.x}))
        two_pass = self.full or self.anchor.op in ("var", "std")
        lay = layout(self.O, self.R, self.I, 16 // max(widths) if widths else 1, two_pass, sms=self.k.sms)
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
                  f"  const bool live = o < {outer(self.k, self.O, it)};"]
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
        used = [n for n in self.pw.vec if any(f"r_{n}.v[e]" in b for b in body)]
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
        x_extra = (self.x,) if self.x in self.pw.inputs else ()
        return (["  float K = 0.0f;", f"  if (live) {{ const {self.IT} idx = base;"]
                + ["    " + b for b in self.pw.lines(self.prologue, self.k.shape, "idx", x_extra)] + [f"    K = {self.x}; }}"])

    def element(self, vec: bool = True) -> list[str]:
        x_extra = (self.x,) if self.x in self.pw.inputs else ()
        return self.pw.lines(self.prologue, self.k.shape, "idx", x_extra, vec)

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
        B += s.block(self.block_args, cached)
        return B

    def finish_moments(self) -> list[str]:
        B = self.stats.moments(self.L.cache)
        if self.L.cache:  # an exact second pass over the registers
            B += ["  float q = 0.0f;"]
            B += self.loop(["const float d = cx[j * V + e] - mean;", "q = fmaf(d, d, q);"], "")
            B += [f"  const float m2 = tw_block_reduce<0, {self.block_args}>(q);"]
        return B

    def stats_ready(self) -> list[str]:
        """From combined statistics to what the write or the final value needs."""
        a, op = self.anchor, self.anchor.op
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
        a, op, x = self.anchor, self.anchor.op, self.x
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
        body += [f"const float {a.name} = {expr};"] + self.pw.lines(self.epilogue, self.k.shape, "idx", vec=True)
        body += [f"w_{o}.v[e] = tw_st<{STORAGE[self.nodes[o].dtype]}>({o});" for o in self.k.outputs]
        return self.loop(dedupe_loads(body), "" if self.L.cache else " 4", list(self.k.outputs))

    def results(self, oi: str, cond: str) -> list[str]:
        """A reduction's value, its companions and epilogue at output `oi`, stored by one thread."""
        a, nodes = self.anchor, self.nodes
        B = [f"  if ({cond}) {{", f"    const {self.IT} oi = {oi};"]
        ctype = "long long" if a.dtype == "int64" else "float"
        B.append(f"    const {ctype} {a.name} = {self.stats.value()};")
        for m in self.aux:
            what = nodes[m].attr("what")
            # NOTE: eager's Welford mean is NaN once an inf meets another value, as the variance is
            val = {"max": "v", "min": "v", "mean": "m2 != m2 ? m2 : mean"}[what]
            B.append(f"    const float {m} = {val};")
        B += ["    " + b for b in self.pw.lines(self.epilogue, a.shape, "oi")]
        for o in self.k.outputs:
            dt = nodes[o].dtype
            B.append(f"    out_{o}[oi] = {o};" if dt == "int64" else f"    out_{o}[oi] = tw_st<{STORAGE[dt]}>({o});")
        return B + ["  }"]

    # --- kernels ------------------------------------------------------------------------------

    def kernel(self, name: str, body: list[str], nt: int, templated: bool = True, ws: bool = False) -> str:
        kparams = params(self.k, self.nodes, self.mutable)[0] + batch_params(self.k)[0]
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

    def partial_kernel(self) -> str:
        """Split, first kernel: this chunk's partial statistics into the workspace."""
        L, n = self.L, outer(self.k, self.nout * self.L.split, "")
        slot = f"(o * {self.I}{self.itype} + i) * {L.split}u + blockIdx.x % {L.split}u"
        B = self.head(True) + self.accumulate()
        B += ["  if (live && ty == 0) {"] + ["    " + s for s in self.stats.store(slot, n)] + ["  }"]
        return self.kernel(self.k.name + "_part", B, L.nt, ws=True)

    def merge_lines(self, first: str, step: str, block_args: str) -> list[str]:
        L, n = self.L, outer(self.k, self.nout * self.L.split, "")
        s = self.stats
        B = s.decl() + [f"  if (live) for (unsigned c = {first}; c < {L.split}u; c += {step}) {{"]
        B += ["    " + m for m in s.merge(f"(o * {self.I}{self.itype} + i) * {L.split}u + c", n)] + ["  }"]
        B += s.block(block_args)
        if s.kind == "moments":
            B += self.first_value()
        return B

    def merge_kernel(self) -> str:
        """Split, second kernel: merge the partials; write the chunk (softmax, norms) or the value."""
        L, IT, it = self.L, self.IT, self.itype
        if self.full:
            B = self.head(True) + self.merge_lines("ty", f"{L.ty}u", self.block_args) + self.stats_ready() + self.write()
            return self.kernel(self.k.name + "_fin", B, L.nt, ws=True)
        B = ["  const unsigned t = threadIdx.x, lane = t & 31;",
             f"  const {IT} oi0 = ({IT})blockIdx.x * 8{it} + t / 32u;",
             f"  const bool live = oi0 < {outer(self.k, self.nout, it)};",
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
        ws = self.nout * L.split * nstats(self.anchor.op) if L.split > 1 else 0
        return Launch(ws, L.vec, aligned)

    def source(self) -> str:
        L = self.L
        kernels = [self.main()] if L.split == 1 else [self.partial_kernel(), self.merge_kernel()]
        _, lparams, casts = params(self.k, self.nodes, self.mutable)
        lparams, casts = lparams + batch_params(self.k)[1], casts + batch_params(self.k)[2]
        if L.split > 1:
            lparams += ", void* ws"
            casts += ", (float*)ws"
        lines = [f'extern "C" int tw_launch_{self.k.name}({lparams}, int vec, void* stream) {{',
                 "  cudaStream_t st = (cudaStream_t)stream;", "  (void)vec;"]

        def call(name: str, blocks: str, nt: int, templated: bool = True) -> None:
            if not templated:
                lines.append(f"  {name}<<<{blocks}, {nt}, 0, st>>>({casts});")
            elif L.vec > 1:
                lines.append(f"  if (vec) {name}<{L.vec}><<<{blocks}, {nt}, 0, st>>>({casts});")
                lines.append(f"  else {name}<1><<<{blocks}, {nt}, 0, st>>>({casts});")
            else:
                lines.append(f"  {name}<1><<<{blocks}, {nt}, 0, st>>>({casts});")

        # NOTE: the layout's block count (rows of tx outputs, or O x tiles of I) with O at run time
        blocks = (blocks_of(self.k, self.O, L.tx, L.split) if L.rm
                  else blocks_of(self.k, self.O, 1, -(-self.I // L.tx) * L.split)) if self.k.batch else f"{L.blocks}u"
        if L.split == 1:
            call(self.k.name, blocks, L.nt)
        else:
            call(self.k.name + "_part", blocks, L.nt)
            if self.full or self.rows:
                call(self.k.name + "_fin", blocks, L.nt)
            else:
                call(self.k.name + "_fin", blocks_of(self.k, self.nout, 8), 256, templated=False)
        lines += ["  return (int)cudaGetLastError();", "}", ""]
        return "\n".join(kernels + lines)


def source(k: Kernel, graph: Graph) -> str:
    """One reduce kernel (two where the output is split) and its `extern "C"` launcher."""
    nodes = graph.by_name()
    return anchored_header(k, nodes) + ReduceCode(k, nodes).source()


def launch(k: Kernel, graph: Graph) -> Launch:
    return ReduceCode(k, graph.by_name()).launch()


def traffic(k: Kernel, graph: Graph) -> str:
    """How the kernel reads its input, for the emitted file's header."""
    code = ReduceCode(k, graph.by_name())
    split = f", each output split over {code.L.split} blocks" if code.L.split > 1 else ""
    if not code.full:
        return "one pass" + split
    return ("one read (kept in registers), one write" if code.L.cache else "two reads, one write") + split


def _group_channel(a: Node, shape: tuple) -> str:
    """Channel of element r of row o in group norm: (o % G) * (C / G) + r / (H*W)."""
    G = a.attr("groups")
    hw = prod(shape[2:])
    return f"(unsigned)(o % {G}u) * {shape[1] // G}u + r / {hw}u"
