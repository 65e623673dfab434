"""CUDA source for row kernels: reductions whose results are broadcast back over the rows they reduce.

`x - x.mean(-1, keepdim=True)` as one kernel, the way softmax runs (plan/rows.py says which groups
qualify). The kernel makes one pass over its row per reduction, in order (each pass may read the
results of the ones before: `exp(x - max)` summed), then one pass that computes every element of
the row and writes it. Each reduction accumulates as a lone reduce kernel would (reduce_stats.py,
fp32, the same block reductions) and its result stays in a register of every thread of the row,
with the values computed from it once per output (`rsqrt(mean + eps)`). Full-size values that
more than one pass reads are kept in registers when they fit (`c_<name>`); else each pass reads
the row again from global memory (one launch still; L2 often holds the row). A single reduction
of few long rows splits as softmax does: partial statistics per chunk, then a second kernel
merges them and writes its chunk.
"""
from __future__ import annotations

import re

from torchweld.codegen.common import ITEMSIZE, STORAGE, Launch, anchored_header, compute_type, dedupe_loads
from torchweld.codegen.reduce import ReduceCode
from torchweld.codegen.reduce_stats import Stats
from torchweld.ir import AUX, Graph, Kernel, Node
from torchweld.tiling import Layout, layout

AUX_VALUE = {"max": "v", "min": "v", "mean": "m2 != m2 ? m2 : mean"}  # NOTE: as ReduceCode.results
# NOTE: an fp16/bf16 result is what eager (and a kernel storing it) holds: rounded once, then read in fp32
ROUND = {"float16": "__half2float(__float2half_rn({}))", "bfloat16": "__bfloat162float(__float2bfloat16_rn({}))"}


class RowCode(ReduceCode):
    """Reductions of the same rows, each result read back per element of the row (one kernel)."""

    def __init__(self, k: Kernel, nodes: dict[str, Node]):
        self.anchors = [m for m in k.nodes if nodes[m].is_anchor]
        self.aux_of = {a: [m for m in k.nodes if nodes[m].op == AUX and nodes[m].args[0] == a] for a in self.anchors}
        self.level: dict[str, int] = {}  # the last anchor a member depends on (-1: none)
        for m in k.nodes:
            n = nodes[m]
            own = self.anchors.index(m) if n.is_anchor else -1
            self.level[m] = max([own] + [self.level[r] for r in n.inputs() if r in self.level])
        small, full = tuple(nodes[k.anchor].shape), tuple(k.shape)
        self.member_set = set(k.nodes)
        self.small_values = [m for m in k.nodes if not nodes[m].is_anchor and nodes[m].op != AUX
                             and tuple(nodes[m].shape) == small and (self.level[m] >= 0 or m in k.outputs)]
        self.row_outputs = [o for o in k.outputs if tuple(nodes[o].shape) == full]
        self.small_outputs = [o for o in k.outputs if o not in self.row_outputs]
        self.k, self.nodes = k, nodes
        self.cache = self._cache_set()
        super().__init__(k, nodes)
        self.rows = True

    # --- analysis ----------------------------------------------------------------------------

    def _regs(self) -> set[str]:
        return set(self.anchors) | {m for a in self.anchors for m in self.aux_of[a]}

    def _passes(self) -> list[list[str]]:
        """What each pass over the row computes, were every reused value cached."""
        xs = [self.nodes[a].args[0] for a in self.anchors]
        seconds = [[x] for a, x in zip(self.anchors, xs) if Stats(self.nodes[a], 1).kind == "moments"]
        return [[x] for x in xs] + seconds + ([self.row_outputs] if self.row_outputs else [])

    def _reach(self, targets: list[str], frontier: bool) -> set[str]:
        """The full-size values no reduction made that `targets` are computed from: every one
        (`frontier` False), or only the last ones on each path (what a later pass would keep)."""
        stop = self._regs() | set(self.small_values)
        out, seen, stack = set(), set(), list(targets)
        while stack:
            n = stack.pop()
            if n in seen or n in stop:
                continue
            seen.add(n)
            node = self.nodes[n]
            if tuple(node.shape) == tuple(self.k.shape) and (n in self.k.inputs or self.level.get(n) == -1):
                out.add(n)
                if frontier:
                    continue
            if n in self.member_set:
                stack.extend(node.inputs())
        return out

    def _cache_set(self) -> list[str]:
        """Values a pass reads that an earlier pass made: what the register cache would hold."""
        made, keep = set(), set()
        for targets in self._passes():
            keep |= self._reach(targets, True) & made
            made |= self._reach(targets, False)
        return [n for n in list(self.k.inputs) + list(self.k.nodes) if n in keep]

    def written(self) -> list[str]:
        return list(self.row_outputs)

    def choose_layout(self) -> Layout:
        widths = [ITEMSIZE[self.nodes[n].dtype] for n in self.fullsize + self.written()]
        lay = layout(self.O, self.R, self.I, 16 // max(widths) if widths else 1, True, len(self.cache),
                     split_ok=len(self.anchors) == 1, sms=self.k.sms)
        if not lay.cache:
            self.cache = []
        return lay

    # --- pieces -------------------------------------------------------------------------------

    def _closure(self, targets: list[str], stop: set[str]) -> list[str]:
        """Members needed for `targets` that are not in `stop`, in order."""
        need, stack = set(), list(targets)
        while stack:
            n = stack.pop()
            if n in need or n in stop or n not in self.member_set:
                continue
            need.add(n)
            stack.extend(self.nodes[n].inputs())
        return [m for m in self.k.nodes if m in need]

    def elem(self, targets: list[str], filled: set[str], fill: bool, vec: bool = True) -> tuple[list[str], set[str]]:
        """Lines computing `targets` at element idx of a pass: cached values from registers, the rest
        loaded and recomputed; `fill`: cache values computed here for the passes after."""
        have = frozenset(n for n in self.cache if n in filled)
        need = self._closure(targets, self.regs | set(self.small_values) | have)
        assert not any(self.nodes[m].is_anchor or self.nodes[m].op == AUX for m in need), need
        refs = set(targets) | {r for m in need for r in self.nodes[m].inputs()}
        lines = [f"const {compute_type(self.nodes[n].dtype)} {n} = c_{n}[j * V + e];"
                 for n in self.cache if n in have and n in refs]
        extra = tuple(t for t in targets if t in self.pw.inputs)
        lines += self.pw.lines(need, self.k.shape, "idx", extra, vec, have=have)
        new = [n for n in self.cache if fill and n not in have and n in refs | set(need)]
        lines += [f"c_{n}[j * V + e] = {n};" for n in new]
        return dedupe_loads(lines), set(new)

    def first(self, x: str) -> list[str]:
        """K: x at the output's first element (the shift of the moments' sums), from global memory."""
        need = self._closure([x], self.regs | set(self.small_values))
        extra = (x,) if x in self.pw.inputs else ()
        body = self.pw.lines(need, self.k.shape, "idx", extra)
        return (["  float K = 0.0f;", f"  if (live) {{ const {self.IT} idx = base;"]
                + ["    " + b for b in body] + [f"    K = {x}; }}"])

    def declare(self, a: str) -> list[str]:
        ctype = "long long" if self.nodes[a].dtype == "int64" else "float"
        return [f"  {ctype} {a};"] + [f"  float {m};" for m in self.aux_of[a]]

    def finish(self, a: str, s: Stats) -> list[str]:
        """The result and its companions, rounded to their dtype as a lone kernel would store them."""
        out = [(a, s.value())] + [(m, AUX_VALUE[self.nodes[m].attr("what")]) for m in self.aux_of[a]]
        return [f"  {n} = {ROUND.get(self.nodes[n].dtype, '{}').format(v)};" for n, v in out]

    def anchor_pass(self, i: int, filled: set[str]) -> list[str]:
        """Reduction i over this thread's chunk and the block; its result (and companions) in registers."""
        a = self.anchors[i]
        node = self.nodes[a]
        x, s, cached = node.args[0], Stats(node, self.R), bool(self.cache)
        B = self.declare(a) + ["  {"] + s.decl()
        if s.kind == "moments" and not cached:
            B += self.first(x)
        body, new = self.elem([x], filled, fill=True)
        B += self.loop(body + s.update(x, cached), "" if cached else " 4")
        filled |= new
        B += s.block(self.block_args, cached)
        if s.kind == "moments":
            B += s.moments(cached)
            if cached:  # an exact second pass over the registers
                again, _ = self.elem([x], filled, fill=False)
                B += ["  float q = 0.0f;"] + self.loop(again + [f"const float d = {x} - mean;", "q = fmaf(d, d, q);"], "")
                B += [f"  const float m2 = tw_block_reduce<0, {self.block_args}>(q);"]
        return B + self.finish(a, s) + ["  }"]

    def reduced(self, targets: list[str]) -> list[str]:
        """Values at the output's shape (from results so far), once per thread at its output oi."""
        need = self._closure(targets, self.regs)
        self.regs |= set(need)
        return ["  " + b for b in self.pw.lines(need, self.nodes[self.k.anchor].shape, "oi")]

    def at_level(self, i: int) -> list[str]:
        return self.reduced([m for m in self.small_values if self.level[m] == i])

    def store(self, cond: str) -> list[str]:
        if not self.small_outputs:
            return []
        B = self.reduced([o for o in self.small_outputs if o not in self.regs]) + [f"  if ({cond}) {{"]
        for o in self.small_outputs:
            dt = self.nodes[o].dtype
            B.append(f"    out_{o}[oi] = {o};" if dt == "int64" else f"    out_{o}[oi] = tw_st<{STORAGE[dt]}>({o});")
        return B + ["  }"]

    def write(self, filled: set[str]) -> list[str]:
        """Every element of the row through the epilogue, stored as vectors."""
        if not self.row_outputs:
            return []
        body, _ = self.elem(self.row_outputs, filled, fill=False)
        body += [f"w_{o}.v[e] = tw_st<{STORAGE[self.nodes[o].dtype]}>({o});" for o in self.row_outputs]
        return self.loop(body, "" if self.cache else " 4", self.row_outputs)

    def _with_oi(self, head: list[str], B: list[str]) -> list[str]:
        """head, the clamped output index where the body reads it (threads past the end read output 0)."""
        if not any(re.search(r"\boi\b", b) for b in B):
            return head + B
        it = self.itype
        return head + [f"  const {self.IT} oi = live ? o * {self.I}{it} + i : 0{it};"] + B

    # --- kernels ------------------------------------------------------------------------------

    def main(self) -> str:
        """Unsplit: one pass per reduction (the row cached in registers where it fits), then the write."""
        self.regs = self._regs()
        filled: set[str] = set()
        B = [f"  {compute_type(self.nodes[n].dtype)} c_{n}[PER * V];" for n in self.cache]
        for i in range(len(self.anchors)):
            B += self.anchor_pass(i, filled) + self.at_level(i)
        B += self.store("live && ty == 0") + self.write(filled)
        return self.kernel(self.k.name, self._with_oi(self.head(False), B), self.L.nt)

    def merge_kernel(self) -> str:
        """Split, second kernel: merge the chunks' partial statistics, then write this block's chunk."""
        self.regs = self._regs()
        a, s, L = self.anchors[0], self.stats, self.L
        B = self.declare(a) + ["  {"] + self.merge_lines("ty", f"{L.ty}u", self.block_args)
        if s.kind == "moments":
            B += s.moments(False)
        B += self.finish(a, s) + ["  }"] + self.at_level(0)
        B += self.store(f"live && ty == 0 && blockIdx.x % {L.split}u == 0") + self.write(set())
        return self.kernel(self.k.name + "_fin", self._with_oi(self.head(True), B), L.nt, ws=True)

    def traffic(self) -> str:
        """How the kernel reads its rows, for the emitted file's header."""
        write = ", one write" if self.row_outputs else ""
        chain = f"{len(self.anchors)} reductions of each row in turn, " if len(self.anchors) > 1 else ""
        if self.L.split > 1:
            return f"two reads{write}, each output split over {self.L.split} blocks"
        reads = len(self.anchors) + bool(self.row_outputs)
        if self.cache or reads == 1:
            return f"{chain}one read{' (kept in registers)' if self.cache else ''}{write}"
        return f"{chain}{reads} reads{write}"


def source(k: Kernel, graph: Graph) -> str:
    """One row kernel (two where its single reduction is split) and its `extern "C"` launcher."""
    nodes = graph.by_name()
    return anchored_header(k, nodes) + RowCode(k, nodes).source()


def launch(k: Kernel, graph: Graph) -> Launch:
    return RowCode(k, graph.by_name()).launch()


def traffic(k: Kernel, graph: Graph) -> str:
    return RowCode(k, graph.by_name()).traffic()
