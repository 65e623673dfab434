"""Tile, stride and launch arithmetic that more than one stage decides with: pure functions of shapes.

Capture asks whether a depthwise convolution has a tiling before it makes it an anchor; plan asks
how a reduction's rows would be laid out before it chains them, and which kernels have a build for
channels-last operands; codegen prints what they chose.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from torchweld.ir import Graph, Kernel, Node

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "bool": 1, "int64": 8}
THREADS = 256  # a block of the kernels that give each thread its own outputs (pointwise, pool)


# --- strides --------------------------------------------------------------------------------------

def contiguous_strides(shape: tuple) -> tuple:
    return tuple(prod(shape[d + 1:]) for d in range(len(shape)))


def own_strides(shape: tuple, stride: tuple) -> tuple:
    """Element strides of a value; size-1 dims get 0 (they broadcast), unknown means contiguous."""
    stride = tuple(stride) if stride and len(stride) == len(shape) else contiguous_strides(shape)
    return tuple(0 if size == 1 else st for size, st in zip(shape, stride))


def is_contiguous(node: Node) -> bool:
    """`node` is laid out as a contiguous tensor of its shape (size-1 dims aside; no captured strides: contiguous)."""
    return own_strides(node.shape, node.stride) == own_strides(node.shape, ())


def memory_order(shape: tuple, stride: tuple) -> list[int]:
    """Dims from outermost to innermost in memory (size-1 dims last: they take no place)."""
    own = own_strides(tuple(shape), tuple(stride))
    return sorted(range(len(shape)), key=lambda d: (shape[d] == 1, -own[d], d))


def dense_strides(shape: tuple, order: list[int]) -> tuple:
    out, step = [0] * len(shape), 1
    for d in reversed(order):
        out[d] = step
        step *= shape[d]
    return tuple(out)


def out_strides(node: Node, order: list[int]) -> tuple:
    """The strides a pool kernel writes `node` with (and its wrapper allocates): the captured ones
    where they lay the value out densely, else dense in the pooled tensor's memory order."""
    shape = tuple(node.shape)
    if node.stride and len(node.stride) == len(shape):
        big = sorted((node.stride[d], shape[d]) for d in range(len(shape)) if shape[d] != 1)
        step = 1
        for st, size in big:
            if st != step:
                break
            step *= size
        else:
            return tuple(node.stride)
    return dense_strides(shape, order)


# --- reduce kernels ---------------------------------------------------------------------------
# How a reduce kernel spreads its work: threads per output, vector width, row splits, register cache.
# 
# The anchor's input is seen as [O, R, I] and reduced over R. Rows (I == 1) put a row's threads
# side by side, each loading `vec` consecutive elements (16 bytes) `per` times, short rows packed
# several to a block; with I > 1 threads run along the contiguous inner dim and loop over R. Too few
# outputs to fill the GPU split each one's R into `split` chunks (one block each): a first kernel
# writes per-chunk partial statistics, a second combines them. Softmax and norms keep their chunk
# in registers (`cache`) when it is short enough, so their input is read once.

SMS = 132  # multiprocessors of an H100/H200: the target when no GPU is present to ask
CACHE = 32  # fp32 values a thread may keep in registers between a kernel's two passes
PER = 4  # vector loads a thread aims to have in flight


@dataclass(frozen=True)
class Layout:
    nt: int  # threads per block
    tx: int  # outputs per block
    ty: int  # threads per output
    rm: bool  # rows (I == 1): an output's threads side by side
    vec: int  # elements per load along a row (1 where R does not divide evenly)
    split: int  # blocks per output
    chunk: int  # elements of R a block reduces
    cache: bool  # the chunk stays in registers between two passes
    blocks: int  # of the main (or first) kernel

    def per(self, vec: int) -> int:
        """Loop trips of a thread over its chunk with loads of `vec` elements."""
        return -(-self.chunk // (self.ty * vec))


def pow2ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def device_sms() -> int:
    """The current CUDA device's multiprocessor count, or SMS where there is none."""
    import torch

    if not torch.cuda.is_available():
        return SMS
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def layout(O: int, R: int, I: int, vec: int = 1, two_pass: bool = False, ncache: int = 1,
           split_ok: bool = True, sms: int = SMS) -> Layout:
    """The layout of a reduce kernel over [O, R, I] on a GPU of `sms` multiprocessors; `two_pass`: it
    reads each element twice, and would keep `ncache` values of each in registers; `split_ok`: a row
    may span several blocks. Outputs too few to fill the GPU (under `sms` blocks) are split so that
    about two blocks run on each multiprocessor; `sms` 0 means SMS."""
    sms = sms or SMS
    if I == 1:
        V = vec if vec > 1 and R % vec == 0 else 1
        split = 1
        if split_ok and O < sms and R >= 8 * 1024 * V:  # few long rows: more blocks than rows
            split = min(max(2, 2 * sms // O), R // (4 * 128 * V))
        chunk = -(-R // split)
        chunk = -(-chunk // V) * V
        split = -(-R // chunk)
        nvec = chunk // V
        ty = min(1024, pow2ceil(-(-nvec // PER)))
        if split > 1:
            ty = max(ty, 128)
        elif two_pass and ncache > 1:  # NOTE: more threads a row where that lets every cached value fit
            fits = [t for t in (ty, 2 * ty, 4 * ty, 8 * ty) if t <= 1024 and
                    ncache * -(-chunk // (t * V)) * V <= (CACHE if t < 1024 else CACHE // 2)]
            ty = fits[0] if fits else ty
        tx = max(min(256 // ty, pow2ceil(O)), -(-32 // ty))  # NOTE: whole warps: shuffles name all 32 lanes
        blocks = -(-O // tx) * split
    else:
        V = 1
        tx = min(32, pow2ceil(I))
        ty = 256 // tx
        blocks0 = O * -(-I // tx)
        split = 1
        if split_ok and blocks0 < sms and R >= 64 * ty:
            split = min(max(2, 2 * sms // blocks0), R // (8 * ty))
        chunk = -(-R // split)
        split = -(-R // chunk)
        blocks = blocks0 * split
    most = CACHE if tx * ty < 1024 else CACHE // 2  # NOTE: 1024 threads leave 64 registers each
    cache = (two_pass and ncache > 0 and split == 1 and ncache * -(-chunk // ty) <= most
             and ncache * -(-chunk // (ty * V)) * V <= most)
    return Layout(tx * ty, tx, ty, I == 1, V, split, chunk, cache, blocks)


# --- depthwise convolutions -------------------------------------------------------------------
# Constants are named for the depthwise kernel (codegen/depthwise.py), which prints the tiling below.
DW_THREADS = 256  # threads a block aims at
SMEM_BUDGET = 32 * 1024  # bytes of shared memory a block aims under (several blocks share an SM)
SMEM_MAX = 48 * 1024  # static shared memory a kernel may declare
MAX_REG_TAPS = 64  # weights held in registers; more: read from shared memory per tap
MAX_SEGMENT = 40  # floats of one input row a thread holds in registers
MAX_MULTIPLIER = 4  # output channels per input channel (a block computes them all in turn)


@dataclass(frozen=True)
class Geometry:
    """A depthwise convolution in 2d terms (a 1d one has H = KH = 1): sizes, kernel, stride, padding, dilation."""

    N: int
    C: int  # input channels = groups
    M: int  # output channels per input channel
    H: int
    W: int
    OH: int
    OW: int
    KH: int
    KW: int
    SH: int = 1
    SW: int = 1
    PH: int = 0  # input rows before output row 0's window (negative: it starts inside the input)
    PW: int = 0
    DH: int = 1
    DW: int = 1


def geometry(a: Node, nodes: dict[str, Node]) -> Geometry:
    x, w = nodes[a.args[0]], nodes[a.args[1]]
    lead = 2 if len(x.shape) == 3 else 0  # a 1d convolution: height 1, no padding, stride and dilation 1

    def two(key, fill):
        return (fill,) * (lead // 2) + tuple(a.attr(key))

    (SH, SW), (PH, PW), (DH, DW) = two("stride", 1), two("padding", 0), two("dilation", 1)
    if a.attr("window") is not None:  # an output window (window.py): it starts further into the input
        (WH, WW) = (0,) * (lead // 2) + tuple(a.attr("window"))
        PH, PW = PH - WH * SH, PW - WW * SW
    H, W = (1,) * (lead // 2) + tuple(x.shape[2:])
    OH, OW = (1,) * (lead // 2) + tuple(a.shape[2:])
    KH, KW = (1,) * (lead // 2) + tuple(w.shape[2:])
    N, C = x.shape[:2]
    return Geometry(N, C, a.shape[1] // C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW)


@dataclass(frozen=True)
class Tiling:
    """How blocks and threads cover the output; sizes in elements, shared memory in floats."""

    VH: int  # output rows a thread computes
    VW: int  # consecutive output columns a thread computes
    TX: int  # threads across a tile
    TY: int  # threads down a tile
    PB: int  # planes a block holds (small planes share a block)
    tiles_h: int
    tiles_w: int
    IH: int  # input tile rows
    IWP: int  # input tile row pitch (a multiple of 4)
    RH: int  # input rows one thread reads
    LS: int  # floats of one input row a thread reads (`regs`)
    regs: bool  # weights in registers, each row segment read once; else per tap from shared memory
    vec: bool  # row segments read as 16-byte vectors

    @property
    def threads(self) -> int:
        return self.TX * self.TY * self.PB

    @property
    def tile(self) -> int:
        return self.IH * self.IWP


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def smem_bytes(g: Geometry, t: Tiling) -> int:
    return 4 * t.PB * (t.tile + g.M * (g.KH * g.KW + 1))


def _tiling(g: Geometry, VH: int, VW: int, TX: int, TY: int, PB: int) -> Tiling:
    seg = (VW - 1) * g.SW + (g.KW - 1) * g.DW + 1
    vec = VW * g.SW % 4 == 0
    LS = cdiv(seg, 4) * 4 if vec else seg
    regs = g.KH * g.KW <= MAX_REG_TAPS and LS <= MAX_SEGMENT
    cols, rows = cdiv(g.OW, VW), cdiv(g.OH, VH)
    tiles_w, tiles_h = cdiv(cols, TX), cdiv(rows, TY)
    TX, TY = cdiv(cols, tiles_w), cdiv(rows, tiles_h)  # the same work in every tile
    IH = (TY * VH - 1) * g.SH + (g.KH - 1) * g.DH + 1
    IWP = cdiv((TX - 1) * VW * g.SW + (LS if regs else seg), 4) * 4
    RH = (VH - 1) * g.SH + (g.KH - 1) * g.DH + 1
    return Tiling(VH, VW, TX, TY, PB, tiles_h, tiles_w, IH, IWP, RH, LS, regs, vec and regs)


def tiling(g: Geometry) -> Tiling | None:
    """Tile sizes for `g`: about DW_THREADS threads a block, shared memory under SMEM_BUDGET where it
    can be; None where even one thread's tile needs more than SMEM_MAX."""
    if g.H * g.W >= 2**31 or g.OH * g.OW >= 2**31:
        return None
    VW = 4 if g.OW >= 8 else 2 if g.OW >= 2 else 1
    VH = 4 if g.OH >= 8 else 2 if g.OH >= 2 else 1
    if not _tiling(g, 1, VW, 1, 1, 1).regs:
        VH = 1  # NOTE: weights are read per tap: rows of outputs share no reads
    cols, rows = cdiv(g.OW, VW), cdiv(g.OH, VH)
    TX = min(cols,  DW_THREADS // min(rows, 8))
    TY = min(rows,  DW_THREADS // TX)
    t = _tiling(g, VH, VW, TX, TY, 1)
    while smem_bytes(g, t) > SMEM_BUDGET and t.TX * t.TY > 1:
        TY, TX = (cdiv(t.TY, 2), t.TX) if t.TY > 1 else (1, cdiv(t.TX, 2))
        t = _tiling(g, VH, VW, TX, TY, 1)
    if smem_bytes(g, t) > SMEM_MAX:
        return None
    if t.tiles_h * t.tiles_w == 1:  # whole planes: several to a block when they are small
        pb = max(1, min(g.N * g.C,  DW_THREADS // 2 // (t.TX * t.TY), SMEM_BUDGET // smem_bytes(g, t)))
        t = replace(t, PB=pb)
    return t


# --- channels-last builds -----------------------------------------------------------------------
# A kernel that reads a convolution's output run channels-last may have a second build for those
# strides (codegen/pointwise_cl.py, and pool.channels_last): the plan keeps such a
# convolution's output as made only where every kernel reading it has one (plan/conv_layout.py).
CL_SMEM = 40 * 1024  # bytes of tiles a channels-last pointwise block may hold (the static limit is 48 KiB)


@dataclass(frozen=True)
class ChannelsLastTile:
    """How the channels-last build of a pointwise kernel covers [O, C, P] (P: the spatial dims flattened)."""

    O: int
    C: int
    P: int
    tc: int  # channels a block owns
    tp: int  # positions a block owns
    vl: int  # elements a load of a staged operand (along C)
    vs: int  # elements a store (along P)
    staged: tuple[tuple[str, int, int], ...]  # (operand, stride of o, stride of a position); a channel's is 1

    @property
    def blocks(self) -> int:
        return self.O * -(-self.C // self.tc) * -(-self.P // self.tp)


def channels_last_tile(k: Kernel, graph: Graph, strides: dict[str, tuple]) -> ChannelsLastTile | None:
    """How pointwise `k` runs with the operands in `strides` at those strides; None where one of them
    is not laid out channel-innermost over the whole [C, P] of the kernel (the wrapper then converts it)."""
    nodes = graph.by_name()
    shape = tuple(k.shape)
    if k.kind != "pointwise" or len(shape) < 3 or not strides:
        return None
    O, C, P = shape[0], shape[1], prod(shape[2:])
    vec = max(1, 16 // max(ITEMSIZE[nodes[o].dtype] for o in k.outputs))
    live = [d for d in range(2, len(shape)) if shape[d] != 1]
    if C == 1 or not live:
        return None
    staged, vl = [], vec if C % vec == 0 else 1
    for a, stride in strides.items():
        n = nodes[a]
        if len(n.shape) != len(shape) or tuple(n.shape[1:]) != shape[1:]:
            return None
        own = own_strides(tuple(n.shape), tuple(stride))
        if own[1] != 1 or any(own[d] != own[e] * shape[e] for d, e in zip(live, live[1:])):
            return None
        staged.append((a, own[0], own[live[-1]]))
        if own[0] % vec or own[live[-1]] % vec:
            vl = 1
    tc = min(32, pow2ceil(C))
    tp = min(THREADS * 4 // tc, max(32, pow2ceil(P)))
    if len(staged) * tc * (tp + 1) * 8 > CL_SMEM:
        return None
    return ChannelsLastTile(O, C, P, tc, tp, vl, vec if P % vec == 0 else 1, tuple(staged))


def pool_channels_last(k: Kernel, graph: Graph, strides: dict[str, tuple]) -> Graph | None:
    """`graph` with pool kernel `k`'s operands in `strides` at those strides and the pooled value (when
    the kernel computes it) laid out as they are, so that threads follow their memory order; None
    where the outputs would then be written in another layout than captured."""
    nodes = graph.by_name()
    x = nodes[nodes[k.anchor].args[0]]
    new = {a: replace(nodes[a], stride=tuple(s)) for a, s in strides.items()}
    if x.name in k.nodes:
        like = next((s for a, s in strides.items() if tuple(nodes[a].shape) == tuple(x.shape)), None)
        if like is None:
            return None
        new[x.name] = replace(x, stride=dense_strides(tuple(x.shape), memory_order(tuple(x.shape), like)))
    before = memory_order(tuple(x.shape), tuple(x.stride))
    after = memory_order(tuple(x.shape), tuple(new.get(x.name, x).stride))
    if any(out_strides(nodes[o], after) != out_strides(nodes[o], before) for o in k.outputs):
        return None
    return replace(graph, nodes=tuple(new.get(n.name, n) for n in graph.nodes))
