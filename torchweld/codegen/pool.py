"""CUDA source for pool kernels: max, average and adaptive pooling with a prologue and epilogue.

One thread per output element. Threads follow the memory order of the pooled tensor (W fastest
for NCHW, C fastest for channels-last), so a warp's loads and stores are coalesced; each thread
walks its window, recomputing the pointwise prologue at every position it reads, then applies
the epilogue to the pooled value and stores it. Windows follow ATen's kernels exactly:

- max pool: positions b + i*dilation (b = o*stride - pad, i < kernel) that lie inside the
  input (the padding is -inf); NaN propagates by ATen's own test, `v > acc || v != v`.
  ceil_mode windows that would start in the right padding are not in the captured output.
- avg pool: the sum over the positions inside the input, divided by divisor_override, else by
  the window clipped to input + padding (count_include_pad) or to the input alone; an empty
  window gives 0.
- adaptive: positions [floor(o*In/Out), ceil((o+1)*In/Out)); the average divides by each
  dim's window length in turn, as ATen does (`sum / kH / kW`).

Every index expression is written in a small C subset (+ - * / % tw_min tw_max, `||`, casts as
`(T)(...)`) that tests/test_pool.py evaluates in Python and checks against torch's pooling.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from torchweld.codegen.common import (STORAGE, THREADS, anchored_header, blocks_of, compute, kernel_with_launcher,
                                      outer, split_at_anchor, variant_name)
from torchweld.ir import Graph, Kernel, Node
from torchweld.tiling import dense_strides, memory_order, out_strides, own_strides, pool_channels_last

UNROLL = 64  # fixed windows up to this many positions are unrolled


@dataclass(frozen=True)
class Axis:
    """One pooled dim: the input positions that output coordinate q_c{dim} reads."""

    dim: int
    size: int  # input size
    out: int  # output size
    k: int = 1  # fixed window: q_b + i*dil for i < k, with q_b = q_c*stride - pad,
    stride: int = 1  # keeping positions inside [0, size)
    pad: int = 0
    dil: int = 1
    variable: bool = False  # adaptive window of varying length: [q_s, q_e)

    @property
    def checked(self) -> bool:
        """A fixed window may reach outside the input, so each position is tested."""
        last = (self.out - 1) * self.stride - self.pad + (self.k - 1) * self.dil
        return self.pad > 0 or last >= self.size

    def decls(self, avg: bool) -> list[tuple[str, str, str]]:
        """(C type, name, expression) lines: the window of this thread along this dim."""
        d, c = self.dim, f"q_c{self.dim}"
        if self.variable:
            wide = "unsigned long long" if self.size * self.out >= 2**31 else "unsigned"
            return [("int", f"q_s{d}", f"(int)((({wide})({c}) * {self.size}) / {self.out})"),
                    ("int", f"q_e{d}", f"(int)((({wide})({c}) * {self.size} + {self.size + self.out - 1}) / {self.out})")]
        out = [("int", f"q_b{d}", f"(int)({c})" + (f" * {self.stride}" if self.stride != 1 else "")
                + (f" - {self.pad}" if self.pad else ""))]
        if avg and self.checked:
            out += [("int", f"q_n{d}", f"tw_min(q_b{d} + {self.k}, {self.size}) - tw_max(q_b{d}, 0)"),
                    ("int", f"q_z{d}", f"tw_min(q_b{d} + {self.k}, {self.size + self.pad}) - q_b{d}")]
        return out

    def position(self) -> str:
        return f"q_b{self.dim} + q_i{self.dim}" + (f" * {self.dil}" if self.dil != 1 else "")

    def outside(self) -> str:
        return f"(q_h{self.dim} < 0) || (q_h{self.dim} >= {self.size})"

    def length(self) -> str:
        """Positions in the window (adaptive)."""
        return f"q_e{self.dim} - q_s{self.dim}" if self.variable else str(self.k)

    def loop(self, unroll: bool) -> list[str]:
        d = self.dim
        if self.variable:
            return [f"for (int q_h{d} = q_s{d}; q_h{d} < q_e{d}; ++q_h{d}) {{"]
        out = (["#pragma unroll"] if unroll else []) + [
            f"for (int q_i{d} = 0; q_i{d} < {self.k}; ++q_i{d}) {{", f"  const int q_h{d} = {self.position()};"]
        return out + ([f"  if ({self.outside()}) continue;"] if self.checked else [])


def axes(anchor: Node, in_shape: tuple) -> list[Axis]:
    nd = len(in_shape)
    if anchor.op.startswith("adaptive"):
        out = anchor.attr("out")
        first = nd - len(out)
        return [_adaptive_axis(first + i, in_shape[first + i], o) for i, o in enumerate(out)]
    k = anchor.attr("kernel")
    first = nd - len(k)
    dil = anchor.attr("dilation", (1,) * len(k))
    return [Axis(first + i, in_shape[first + i], anchor.shape[first + i], k[i], anchor.attr("stride")[i],
                 anchor.attr("padding")[i], dil[i]) for i in range(len(k))]


def _adaptive_axis(dim: int, size: int, out: int) -> Axis:
    if size % out == 0:  # equal windows: a fixed window of size/out, stride size/out
        return Axis(dim, size, out, size // out, size // out)
    return Axis(dim, size, out, variable=True)


class Geometry:
    """Where one thread of a pool kernel reads and writes."""

    def __init__(self, anchor: Node, x: Node):
        self.op = anchor.op
        self.in_shape, self.out_shape = tuple(x.shape), tuple(anchor.shape)
        self.axes = axes(anchor, self.in_shape)
        self.spatial = {a.dim for a in self.axes}
        self.order = memory_order(self.in_shape, x.stride)
        self.divisor = anchor.attr("divisor")
        self.include_pad = anchor.attr("count_include_pad", True)

    @property
    def numel(self) -> int:
        return prod(self.out_shape)

    def coord_decls(self, IT: str) -> list[tuple[str, str, str]]:
        """Output coordinates q_c{dim} of thread q_t, innermost dim of the memory order fastest."""
        live = [d for d in self.order if self.out_shape[d] != 1]
        out, rest = [], "q_t"
        for j, d in enumerate(reversed(live)):
            if j == len(live) - 1:
                out.append((IT, f"q_c{d}", rest))
            else:
                out.append((IT, f"q_c{d}", f"{rest} % {self.out_shape[d]}"))
                out.append((IT, f"q_r{d}", f"{rest} / {self.out_shape[d]}"))
                rest = f"q_r{d}"
        out += [(IT, f"q_c{a.dim}", "0") for a in self.axes if a.out == 1]  # read by the window lines
        return out

    def window_decls(self) -> list[tuple[str, str, str]]:
        return [line for a in self.axes for line in a.decls(self.op == "avg_pool")]

    def value(self) -> tuple[str, str | None]:
        """The pooled value from the window's sum or max `q_acc`, and when it is 0 instead (empty window)."""
        if "max" in self.op:
            return "q_acc", None
        if self.op == "adaptive_avg_pool":
            return "q_acc" + "".join(f" / (float)({a.length()})" for a in self.axes), None
        checked = [a for a in self.axes if a.checked]
        empty = " || ".join(f"(q_n{a.dim} <= 0)" for a in checked) or None
        if self.divisor:
            div = str(self.divisor)
        elif not checked:
            div = str(prod(a.k for a in self.axes))
        else:
            name = "q_z" if self.include_pad else "q_n"
            div = " * ".join(f"{name}{a.dim}" if a.checked else str(a.k) for a in self.axes)
        return f"q_acc / (float)({div})", empty

    def offset(self, shape: tuple, stride: tuple, space: str, IT: str) -> tuple[str, str]:
        """(part at the output's lead coordinates, part along the window) of an operand's offset;
        `space` is "in" for an operand at the pooled input's shape, "out" at the output's."""
        full = self.in_shape if space == "in" else self.out_shape
        st = (0,) * (len(full) - len(shape)) + own_strides(tuple(shape), tuple(stride))
        lead, win = [], []
        for d, s in enumerate(st):
            if s == 0:
                continue
            if space == "in" and d in self.spatial:
                win.append(f"({IT})(q_h{d})" + (f" * {s}" if s != 1 else ""))
            else:
                lead.append(f"q_c{d}" + (f" * {s}" if s != 1 else ""))
        return " + ".join(lead) or "0", " + ".join(win)

    def max_offset(self, shape: tuple, stride: tuple) -> int:
        st = own_strides(tuple(shape), tuple(stride))
        return sum((n - 1) * s for n, s in zip(shape, st))


def source(k: Kernel, graph: Graph) -> str:
    """One pool kernel and its `extern "C"` launcher."""
    nodes = graph.by_name()
    a = nodes[k.anchor]
    x = a.args[0]
    geo = Geometry(a, nodes[x])
    members = set(k.nodes)
    prologue, epilogue = split_at_anchor(k, nodes)
    strides = {o: out_strides(nodes[o], geo.order) for o in k.outputs}
    reach = [geo.max_offset(nodes[i].shape, nodes[i].stride) for i in k.inputs]
    reach += [geo.max_offset(nodes[o].shape, strides[o]) for o in k.outputs]
    big = max(reach + [geo.numel, prod(geo.in_shape)]) >= 2**31
    IT = "unsigned long long" if big else "unsigned"
    B = [f"  const {IT} q_t = ({IT})blockIdx.x * {THREADS}u + threadIdx.x;",
         f"  if (q_t >= {outer(k, geo.numel, 'ull' if big and k.batch else 'u')}) return;"]
    B += [f"  const {t} {n} = {e};" for t, n, e in geo.coord_decls(IT) + geo.window_decls()]

    # Operands read in the window: those that do not move along it are loaded once, before it.
    prologue_inputs = list(dict.fromkeys([r for m in prologue for r in nodes[m].inputs() if r not in members]
                                    + ([x] if x not in members else [])))
    invariant, loop_loads = [], []
    for r in prologue_inputs:
        lead, win = geo.offset(nodes[r].shape, nodes[r].stride, "in", IT)
        line = f"const auto {r} = tw_ld(in_{r}[{lead + (' + ' + win if win else '')}]);"
        (loop_loads if win else invariant).append((r, line))
    fixed = {r for r, _ in invariant}
    hoisted = []
    for m in prologue:
        if all(i in fixed for i in nodes[m].inputs()):
            fixed.add(m)
            hoisted.append(m)
    B += ["  " + line for _, line in invariant] + ["  " + compute(nodes[m]) for m in hoisted]
    B.append(f"  float q_acc = {'-INFINITY' if 'max' in a.op else '0.0f'};")
    body = [line for _, line in loop_loads] + [compute(nodes[m]) for m in prologue if m not in fixed]
    body.append(f"q_acc = tw_max({x}, q_acc);" if "max" in a.op else f"q_acc += {x};")
    unroll = prod(ax.k for ax in geo.axes if not ax.variable) <= UNROLL
    depth = 1
    for ax in geo.axes:
        B += ["  " * depth + line for line in ax.loop(unroll)]
        depth += 1
    B += ["  " * depth + line for line in body]
    for _ in geo.axes:
        depth -= 1
        B.append("  " * depth + "}")
    value, empty = geo.value()
    B.append(f"  const float {a.name} = {f'({empty}) ? 0.0f : {value}' if empty else value};")
    epilogue_inputs = list(dict.fromkeys(r for m in epilogue for r in nodes[m].inputs() if r not in members))
    for r in epilogue_inputs:
        if r in fixed:  # NOTE: loaded before the window at the same offset (its pooled dims have size 1)
            continue
        lead, _ = geo.offset(nodes[r].shape, nodes[r].stride, "out", IT)
        B.append(f"  const auto {r} = tw_ld(in_{r}[{lead}]);")
    B += ["  " + compute(nodes[m]) for m in epilogue]
    for o in k.outputs:
        dense = strides[o] == dense_strides(geo.out_shape, geo.order)
        at = "q_t" if dense else geo.offset(geo.out_shape, strides[o], "out", IT)[0]
        B.append(f"  out_{o}[{at}] = tw_st<{STORAGE[nodes[o].dtype]}>({o});")
    # NOTE: a runtime batch is the outermost output coordinate in either memory order: no index takes it modulo
    return anchored_header(k, nodes) + kernel_with_launcher(k, nodes, B, THREADS, blocks_of(k, geo.numel, THREADS))


def channels_last(k: Kernel, graph: Graph, strides: dict[str, tuple]) -> str:
    """`<kernel>_cl`: the same kernel with the operands in `strides` at those strides, its threads in
    their memory order (loads along C coalesced; each output stored at its captured offset)."""
    return source(replace(k, name=variant_name(k)), pool_channels_last(k, graph, strides))
