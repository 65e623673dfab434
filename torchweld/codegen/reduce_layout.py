"""How a reduce kernel spreads its work: threads per output, vector width, row splits, register cache.

The anchor's input is seen as [O, R, I] and reduced over R. Rows (I == 1) put a row's threads
side by side, each loading `vec` consecutive elements (16 bytes) `per` times, short rows packed
several to a block; with I > 1 threads run along the contiguous inner dim and loop over R. Too few
outputs to fill the GPU split each one's R into `split` chunks (one block each): a first kernel
writes per-chunk partial statistics, a second combines them. Softmax and norms keep their chunk
in registers (`cache`) when it is short enough, so their input is read once.
"""
from __future__ import annotations

from dataclasses import dataclass

SMS = 132  # NOTE: an H100's SM count; the split only needs its order of magnitude
TARGET = 2 * SMS  # blocks below which long outputs are split
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


def layout(O: int, R: int, I: int, vec: int = 1, two_pass: bool = False, ncache: int = 1,
           split_ok: bool = True) -> Layout:
    """The layout of a reduce kernel over [O, R, I]; `two_pass`: it reads each element twice, and
    would keep `ncache` values of each in registers; `split_ok`: a row may span several blocks."""
    if I == 1:
        V = vec if vec > 1 and R % vec == 0 else 1
        split = 1
        if split_ok and O < SMS and R >= 8 * 1024 * V:  # few long rows: more blocks than rows
            split = min(max(2, TARGET // O), R // (4 * 128 * V))
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
        if split_ok and blocks0 < SMS and R >= 64 * ty:
            split = min(max(2, TARGET // blocks0), R // (8 * ty))
        chunk = -(-R // split)
        split = -(-R // chunk)
        blocks = blocks0 * split
    most = CACHE if tx * ty < 1024 else CACHE // 2  # NOTE: 1024 threads leave 64 registers each
    cache = (two_pass and ncache > 0 and split == 1 and ncache * -(-chunk // ty) <= most
             and ncache * -(-chunk // (ty * V)) * V <= most)
    return Layout(tx * ty, tx, ty, I == 1, V, split, chunk, cache, blocks)
