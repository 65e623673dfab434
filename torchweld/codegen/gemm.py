"""Our GEMM kernel kind: a spec per GEMM site (shapes, strides, dtype, precision, epilogue) and the
tile plan chosen for it. gemm_source.py writes the CUDA; docs/gemm.md describes the design.

    out[b, m, n] = epilogue(alpha * sum_k A[b, m, k] * B[b, k, n] + beta * C[b, m, n])

Operands are read in place through their element strides, so transposed and broadcast operands
need no copy. Two main loops: wgmma on sm_90a (gemm_sm90.cuh), mma.sync on sm_80 and later
(gemm_sm80.cuh); the launcher picks one by the device at run time."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

DTYPES = {"float32": ("float", 4), "float16": ("__half", 2), "bfloat16": ("__nv_bfloat16", 2)}
PRECISIONS = ("3xtf32", "1xtf32", "native")
REDUCE_OPS = {"sum": 1, "max": 2, "min": 3}
# NOTE: names the epilogue expression sees besides its inputs (gemm_source.py binds them).
RESERVED = {"acc", "row", "col", "batch", "p", "r"}
SMEM_MAX = 232448 - 256  # sm_90's opt-in limit per block, less the static barriers


@dataclass(frozen=True)
class EpilogueInput:
    """An operand the epilogue expression reads: `name[row]` (kind "row"), `name[col]` ("col") or
    `name(row, col)` ("full"), through element strides over (batch, row, col); 0 broadcasts."""
    name: str
    kind: str
    strides: tuple[int, int, int]
    dtype: str = "float32"


@dataclass(frozen=True)
class GemmSpec:
    """One GEMM site. Strides are in elements: A over (batch, m, k), B over (batch, k, n), the output
    and C over (batch, m, n); None means contiguous. `epilogue` is a C++ float expression over `acc`
    (alpha * A@B + beta * C), `row`, `col`, `batch` and the inputs, e.g. `fmaxf(acc + bias[col], 0.f)`.
    `reduce` ("sum", "max", "min") also writes, per row, `reduce_expr` (over `r`, the reduced value)
    of the epilogue values over n; `store=False` writes only that."""
    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "float32"
    precision: str = ""  # "3xtf32" (fp32 default), "1xtf32", "native" (fp16/bf16)
    a_strides: tuple[int, int, int] | None = None
    b_strides: tuple[int, int, int] | None = None
    out_strides: tuple[int, int, int] | None = None
    alpha: float = 1.0
    beta: float = 0.0
    c_strides: tuple[int, int, int] | None = None  # the addmm/baddbmm input; None: no C
    epilogue: str = "acc"
    inputs: tuple[EpilogueInput, ...] = ()
    reduce: str | None = None
    reduce_expr: str = "r"
    reduce_strides: tuple[int, int] | None = None  # over (batch, row); None: contiguous
    store: bool = True
    fold: bool | None = None  # 3xTF32: add each k-tile's products into the sum apart (None: on)
    swap: bool | None = None  # compute out^T = B^T A^T (None: where it saves TF32 conversion work)
    tf32_hi: str = "trunc"  # 3xTF32 B's hi on Hopper: "trunc" (the tensor core's own reading of B) or "rna"
    sms: int = 132  # multiprocessors the tile choice assumes (H100/H200 SXM)
    sm90_tile: tuple[int, int] | None = None  # (BM, BN) instead of the chosen one (tests, tuning)
    sm80_tile: tuple[int, int, int, int] | None = None  # (BM, BN, WM, WN)


@dataclass(frozen=True)
class GemmPlan:
    """What the generator decided for a site: the problem the kernel computes (the site's, or its
    transpose where `swap`), operand layouts, which main loops exist, their tiles."""
    spec: GemmSpec
    swap: bool  # the kernel computes out^T = B^T A^T: its A is B^T, its B is A^T, its rows are columns
    m: int  # the kernel's rows and columns
    n: int
    a: tuple[int, int, int]  # the kernel's strides: A over (batch, m, k), B over (batch, k, n), out (batch, m, n)
    b: tuple[int, int, int]
    out: tuple[int, int, int]
    a_kmaj: bool
    b_kmaj: bool
    vec: bool  # both operands allow 16-byte copies (TMA, cp.async) given aligned pointers
    sm90: tuple[int, int, int] | None  # (BM, BN, stages), None: no wgmma kernel for this site
    sm80: tuple[int, int, int, int, int]  # (BM, BN, WM, WN, stages)

    @property
    def prec(self) -> int:
        return {"3xtf32": 3, "1xtf32": 1, "native": 0}[self.spec.precision]

    @property
    def fold(self) -> bool:
        return self.spec.precision == "3xtf32" and self.spec.fold is not False

    def describe(self) -> str:
        s = self.spec
        ways = []
        if self.sm90:
            bm, bn, st = self.sm90
            ways.append(f"sm_90a wgmma {bm}x{bn}x{128 // DTYPES[s.dtype][1]}, {st} TMA stages")
        bm, bn, wm, wn, st = self.sm80
        ways.append(f"mma.sync {bm}x{bn}x{128 // DTYPES[s.dtype][1]} (warps {wm}x{wn}), {st} cp.async stages")
        return f"{s.precision}{' as (B^T A^T)^T' if self.swap else ''} " + "; ".join(ways)


def unsupported(spec: GemmSpec) -> str | None:
    """Why this generator cannot build `spec`, or None."""
    if spec.dtype not in DTYPES:
        return f"dtype {spec.dtype}"
    if min(spec.m, spec.n, spec.k, spec.batch) < 1:
        return "an empty dimension"
    if spec.batch > 65535:
        return "more than 65535 batches"
    prec = spec.precision or ("3xtf32" if spec.dtype == "float32" else "native")
    if prec not in PRECISIONS or (prec == "native") != (spec.dtype != "float32"):
        return f"precision {prec} for {spec.dtype}"
    if spec.reduce is not None and spec.reduce not in REDUCE_OPS:
        return f"row reduction {spec.reduce}"
    if not spec.store and spec.reduce is None:
        return "nothing to write"
    if spec.swap and spec.reduce:
        return "a row reduction of a transposed problem"
    if spec.tf32_hi not in ("trunc", "rna"):
        return f"tf32_hi {spec.tf32_hi}"
    if spec.sm90_tile and tuple(spec.sm90_tile) not in _EFF90:
        return f"wgmma tile {spec.sm90_tile}"
    if spec.sm80_tile:
        bm, bn, wm, wn = spec.sm80_tile
        warps = (bm // max(wm, 1)) * (bn // max(wn, 1))
        if bm not in (64, 128) or bn not in (64, 128) or bm % wm or bn % wn or wm % 16 or wn % 8 or warps > 8 \
                or (spec.reduce and wn != bn):
            return f"mma.sync tile {spec.sm80_tile}"
    for x in spec.inputs:
        if x.name in RESERVED or not x.name.isidentifier() or x.kind not in ("row", "col", "full") or x.dtype not in DTYPES:
            return f"epilogue input {x.name}"
    return None


def _layout(mn: int, k: int, s_mn: int, s_k: int) -> tuple[int, int, bool]:
    """(s_mn, s_k, k-major) with the stride of a length-1 dimension chosen to make the other contiguous
    where it is (it is never used to address memory)."""
    if k == 1 and s_mn == 1 or mn == 1 and s_k != 1:
        return 1, (s_k if k > 1 else 16), False
    if mn == 1 or k == 1:
        return (s_mn if mn > 1 else 16), 1, True
    return s_mn, s_k, s_k == 1 or s_mn != 1


def _aligned(es: int, *strides: int) -> bool:
    return all(s * es % 16 == 0 and s * es < 1 << 40 for s in strides)


def normalise(spec: GemmSpec) -> GemmSpec:
    """Defaults filled in: precision, contiguous strides, zero batch strides for one batch."""
    m, n, k, nb = spec.m, spec.n, spec.k, spec.batch
    a = spec.a_strides or (m * k, k, 1)
    b = spec.b_strides or (k * n, n, 1)
    out = spec.out_strides or (m * n, n, 1)
    red = spec.reduce_strides or (m, 1)
    if nb == 1:
        a, b, out, red = (0, *a[1:]), (0, *b[1:]), (0, *out[1:]), (0, red[1])
    prec = spec.precision or ("3xtf32" if spec.dtype == "float32" else "native")
    return replace(spec, precision=prec, a_strides=tuple(a), b_strides=tuple(b), out_strides=tuple(out),
                   reduce_strides=tuple(red))


# Tiles and their relative efficiency on sm_90 (leads from public Hopper kernels, not measured here).
_EFF90 = {(128, 256): 1.0, (128, 128): 0.9, (64, 256): 0.8, (64, 128): 0.75, (128, 64): 0.7, (64, 64): 0.55}


def _sm90_smem(es: int, bm: int, bn: int, stages: int, a_kmaj: bool, b_kmaj: bool, prec: int, hi_rna=False) -> int:
    conv = ((es == 4 and (not b_kmaj or hi_rna)) + (prec == 3)) * bn * 128
    return stages * (bm + bn) * 128 + 2 * conv + 1024


def _pick_sm90(spec: GemmSpec, es: int, a_kmaj: bool, b_kmaj: bool, prec: int) -> tuple[int, int, int]:
    best = None
    for (bm, bn), eff in _EFF90.items():
        if spec.sm90_tile and (bm, bn) != tuple(spec.sm90_tile):
            continue
        if prec == 3 and bn > 128 and not spec.sm90_tile:  # 3xTF32 holds a second accumulator set
            continue
        if prec == 3:
            eff = {256: 1.0, 128: 1.0, 64: 0.8}[bn] * (1.0 if bm == 128 else 0.8)
        blocks = math.ceil(spec.m / bm) * (1 if spec.reduce else math.ceil(spec.n / bn)) * spec.batch
        work = bm * (math.ceil(spec.n / bn) * bn if spec.reduce else bn)
        cost = math.ceil(blocks / spec.sms) * work / eff
        if best is None or cost < best[0]:
            best = (cost, bm, bn)
    _, bm, bn = best
    hi_rna = prec == 3 and spec.tf32_hi == "rna"
    stages = max(s for s in range(2, 7) if s == 2 or _sm90_smem(es, bm, bn, s, a_kmaj, b_kmaj, prec, hi_rna) <= SMEM_MAX)
    return bm, bn, stages


def _pick_sm80(spec: GemmSpec) -> tuple[int, int, int, int, int]:
    if spec.sm80_tile:
        bm, bn, wm, wn = spec.sm80_tile
        return bm, bn, wm, wn, 3 if bm + bn > 128 else 4
    if spec.reduce:  # warps stacked along M, each spanning the block's columns
        return (128, 64, 16, 64, 3) if math.ceil(spec.m / 128) * spec.batch >= spec.sms // 2 else (64, 64, 16, 64, 4)
    big = math.ceil(spec.m / 128) * math.ceil(spec.n / 128) * spec.batch >= spec.sms // 2
    return (128, 128, 64, 32, 3) if big else (64, 64, 32, 32, 4)


def plan(spec: GemmSpec) -> GemmPlan:
    """The tile plan of a supported site (raises ValueError with the reason otherwise)."""
    why = unsupported(spec)
    if why:
        raise ValueError(f"GEMM site {spec.name}: unsupported: {why}")
    spec = normalise(spec)
    es = DTYPES[spec.dtype][1]
    ab, am, ak = spec.a_strides
    bb, bk, bn = spec.b_strides
    am, ak, a_kmaj = _layout(spec.m, spec.k, am, ak)
    bn, bk, b_kmaj = _layout(spec.n, spec.k, bn, bk)
    a_contig = ak == 1 if a_kmaj else am == 1
    b_contig = bk == 1 if b_kmaj else bn == 1
    vec = (a_contig and b_contig and _aligned(es, am if a_kmaj else ak, ab, bn if b_kmaj else bk, bb)
           and max(spec.m, spec.n, spec.k) < 1 << 31)
    prec = {"3xtf32": 3, "1xtf32": 1, "native": 0}[spec.precision]
    # NOTE: TF32 wgmma reads B only K-major: an N-major B would go through the converter warps (a
    # transposed copy). With A K-major, the transposed problem has a K-major B (A itself) and reads
    # B^T as its A from registers instead. Row reductions keep rows as rows.
    swap = spec.swap if spec.swap is not None else (es == 4 and vec and a_kmaj and not b_kmaj and not spec.reduce)
    ob, om, on = spec.out_strides
    if swap:
        kp = replace(spec, m=spec.n, n=spec.m)
        a, b, out, a_kmaj, b_kmaj = (bb, bn, bk), (ab, ak, am), (ob, on, om), b_kmaj, a_kmaj
    else:
        kp, a, b, out = spec, (ab, am, ak), (bb, bk, bn), (ob, om, on)
    sm90 = _pick_sm90(kp, es, a_kmaj, b_kmaj, prec) if vec else None
    return GemmPlan(spec, swap, kp.m, kp.n, a, b, out, a_kmaj, b_kmaj, vec, sm90, _pick_sm80(kp))
