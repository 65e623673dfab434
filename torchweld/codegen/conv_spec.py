"""Our convolution kernel kind: implicit GEMM over any convolution or transposed convolution of 1, 2
or 3 spatial dims (conv_source.py writes the CUDA; docs/conv.md describes the design).

    out[n, o..., g*COG + j] = epilogue(sum over taps t, channels i of X(n, o, t, g*CIG + i) W[g, j, t, i])

One GEMM per group g: rows m = the output pixels (n, od, oh, ow), columns the group's COG output
channels, k = (tap, input channel) with the channel fastest. The A operand is gathered from the
input as its tile loads (im2col never exists in memory): a forward tap reads input pixel
i = o * stride - padding + t * dilation; a transposed one reads i = (o + padding - t * dilation) / stride
where that divides exactly (no zero insertion). The weight is read K-major, packed as
[groups * COG, taps, CIG] (runtime/conv_select._tw_conv_pack; a forward weight in channels-last is that already).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from torchweld.codegen.gemm import DTYPES, PRECISIONS, SMEM_MAX

# NOTE: names the epilogue expression sees besides its inputs (conv_source.py binds them).
RESERVED = {"acc", "q", "c", "p"}
KINDS = ("chan", "full")
GLOBAL = ("sum", "mean", "max", "min")  # reductions over every output pixel of a channel
CHANNEL = ("softmax", "log_softmax", "chan_sum", "chan_mean", "chan_max", "chan_min")  # over the channels of a pixel
# (BM, BN, WM, WN): the mma.sync tiles; BN follows the group's output channels.
TILES90 = (16, 32, 64, 128)  # wgmma N of the Hopper loop (BM: 64 or 128, one or two consumer warpgroups)
TILES = ((128, 128, 64, 32), (128, 64, 32, 32), (64, 64, 32, 32), (128, 32, 32, 32), (64, 32, 32, 16))


@dataclass(frozen=True)
class ConvInput:
    """An operand the epilogue reads: `name[c]` (kind "chan", element stride over channels) or
    `name(q, c)` ("full", strides over (n, c, d, h, w) of the output's shape; 0 broadcasts)."""
    name: str
    kind: str
    strides: tuple[int, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class ConvSpec:
    """One convolution site, as torch.convolution's arguments. `size`: the input's spatial size (1 to 3
    dims); strides in elements over (n, c, spatial...); None: channels-last contiguous. `epilogue` is a
    C++ float expression over `acc` (the sum), `c` (the output channel), `q` (the output pixel: q.n,
    q.d, q.h, q.w) and the inputs, e.g. `fmaxf(acc + bias[c], 0.f)`."""
    name: str
    n: int
    cin: int
    cout: int
    size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    output_padding: tuple[int, ...] = ()
    groups: int = 1
    transposed: bool = False
    dtype: str = "float32"
    precision: str = ""  # "3xtf32" (fp32 default), "1xtf32", "native" (fp16/bf16)
    x_strides: tuple[int, ...] | None = None
    out_strides: tuple[int, ...] | None = None
    epilogue: str = "acc"
    inputs: tuple[ConvInput, ...] = ()
    sm80_tile: tuple[int, int, int, int] | None = None  # (BM, BN, WM, WN) instead of the chosen one
    sm90_tile: tuple[int, int] | None = None  # (BM, BN) instead of the chosen one
    # A non-overlapping pool of the epilogue's values ("max" or "avg"; windows of 2, 4 or 8 outputs, kernel =
    # stride, no padding, floor mode) before the store; `post` (over `v`, the pooled value, `c` and per-channel
    # inputs) runs on it. `out_strides` are then the pooled tensor's.
    pool: str = ""
    pool_window: tuple[int, ...] = ()
    pool_divisor: int = 0  # avg: 0 divides by the window's size
    post: str = "v"
    # A reduction of the epilogue's values: over every output pixel of each (n, c) ("sum", "mean", "max", "min":
    # per-tile partials to a workspace, then a small kernel; `post` runs on the result, written at `red_strides`
    # over (n, c); the full output too where `reduce_store`), or over the channels of each pixel ("softmax",
    # "log_softmax": one tile holds every channel; `post` runs on each value, written at `out_strides`; or "chan_sum",
    # "chan_mean", "chan_max", "chan_min": one value per pixel, `post` on it, written at `out_strides` over (n, 1, ...)).
    reduce: str = ""
    reduce_store: bool = False
    red_strides: tuple[int, ...] = ()
    sms: int = 132

    @property
    def dims(self) -> int:
        return len(self.size)

    @property
    def out_size(self) -> tuple[int, ...]:
        return _out(normalise(self))

    @property
    def store_size(self) -> tuple[int, ...]:
        """The spatial size of what the kernel stores: the output's, or the pooled output's."""
        return _store(normalise(self))

    @property
    def store_channels(self) -> int:
        """The channels of what the kernel stores: one where it reduces over them ("chan_*")."""
        return 1 if self.reduce.startswith("chan_") else self.cout

    @property
    def weight_shape(self) -> tuple[int, ...]:
        """torch's weight shape for this convolution."""
        g = self.groups
        if self.transposed:
            return (self.cin, self.cout // g, *self.kernel)
        return (self.cout, self.cin // g, *self.kernel)


def channels_last(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides over (n, c, spatial...) of a channels-last contiguous tensor of `shape`."""
    n, c, *sp = shape
    st = [c]
    for d in reversed(sp[1:]):
        st.insert(0, st[0] * d)
    sp_strides = st if sp else []
    return (c * math.prod(sp), 1, *sp_strides)


def normalise(spec: ConvSpec) -> ConvSpec:
    """Defaults filled in: unit strides and dilations, zero paddings, precision, channels-last strides."""
    d = spec.dims
    one, zero = (1,) * d, (0,) * d
    prec = spec.precision or ("3xtf32" if spec.dtype == "float32" else "native")
    s = replace(spec, stride=tuple(spec.stride) or one, padding=tuple(spec.padding) or zero,
                dilation=tuple(spec.dilation) or one, output_padding=tuple(spec.output_padding) or zero,
                kernel=tuple(spec.kernel), size=tuple(spec.size), precision=prec)
    xs = s.x_strides or channels_last((s.n, s.cin, *s.size))
    os_ = s.out_strides or channels_last((s.n, s.store_channels, *_store(s)))
    return replace(s, x_strides=tuple(xs), out_strides=tuple(os_), red_strides=tuple(s.red_strides) or (s.cout, 1))


def _store(s: ConvSpec) -> tuple[int, ...]:
    out = _out(s)
    return tuple(o // w for o, w in zip(out, s.pool_window)) if s.pool else out


def _out(s: ConvSpec) -> tuple[int, ...]:
    if s.transposed:
        return tuple((i - 1) * st - 2 * p + d * (k - 1) + op + 1 for i, k, st, p, d, op in
                     zip(s.size, s.kernel, s.stride, s.padding, s.dilation, s.output_padding))
    return tuple((i + 2 * p - d * (k - 1) - 1) // st + 1 for i, k, st, p, d in zip(s.size, s.kernel, s.stride, s.padding, s.dilation))


@dataclass(frozen=True)
class ConvPlan:
    """What the generator decided: the GEMM per group (m x n x k), the sizes padded to 3 spatial dims
    (d, h, w; a 1-d conv is h = d = 1), whether 16-byte copies can gather A, and the tile."""
    spec: ConvSpec
    m: int
    n: int
    k: int
    cig: int
    isz: tuple[int, int, int]
    osz: tuple[int, int, int]
    ksz: tuple[int, int, int]
    st: tuple[int, int, int]
    pad: tuple[int, int, int]
    dil: tuple[int, int, int]
    xs: tuple[int, int, int, int, int]  # x strides over (n, c, d, h, w)
    os: tuple[int, int, int, int, int]
    vec: bool
    sm80: tuple[int, int, int, int, int]  # (BM, BN, WM, WN, stages)
    sm90: tuple[int, int, int] | None  # (BM, BN, stages) of the wgmma loop; None: none (no 16-byte gather)
    phased: bool = False  # rows ordered by output phase: a tile of one phase runs only the taps reaching it
    win: tuple[int, int, int] = (1, 1, 1)  # the pool window (d, h, w): rows ordered window by window
    psz: tuple[int, int, int] = (1, 1, 1)  # the stored (pooled) sizes

    @property
    def ws(self) -> int:
        """Floats of a global reduction's workspace: per image, a partial per channel for each row tile
        reaching it, at the smaller tile height of the two loops (cuh/conv_reduce.cuh's twc_slots)."""
        if self.spec.reduce not in GLOBAL:
            return 0
        hw, bm = math.prod(self.osz), min([self.sm80[0]] + ([self.sm90[0]] if self.sm90 else []))
        return self.spec.n * ((hw + bm - 1) // bm + 1) * self.spec.cout

    @property
    def prec(self) -> int:
        return {"3xtf32": 3, "1xtf32": 1, "native": 0}[self.spec.precision]

    def describe(self) -> str:
        s = self.spec
        bm, bn, wm, wn, stg = self.sm80
        kind = "transposed conv" if s.transposed else "conv"
        bk = 128 // DTYPES[s.dtype][1]
        h = f"sm_90a wgmma {self.sm90[0]}x{self.sm90[1]}x{bk}, {self.sm90[2]} stages; " if self.sm90 else ""
        return (f"{s.precision} {kind}{s.dims}d implicit GEMM {s.groups} x ({self.m} x {self.k}) @ ({self.k} x {self.n}), "
                f"{h}mma.sync {bm}x{bn}x{bk} (warps {wm}x{wn}), {stg} cp.async stages, "
                f"{'16-byte' if self.vec else 'element'} gather" + (", phase-ordered rows (taps reading zero skipped)"
                                                                       if self.phased else "") + _red_how(s))


def _red_how(s: ConvSpec) -> str:
    if s.reduce in CHANNEL:
        return f", {s.reduce.removeprefix('chan_')} over the channels in the epilogue"
    if s.reduce:
        return f", {s.reduce} over the pixels in the epilogue (per-tile partials, then a final kernel)" + (
            ", full output stored too" if s.reduce_store else ", full output never stored")
    return ""


def _pad3(t: tuple, fill: int) -> tuple:
    return (fill,) * (3 - len(t)) + tuple(t)


def unsupported(spec: ConvSpec) -> str | None:
    """Why this generator cannot build `spec`, or None."""
    if spec.dtype not in DTYPES:
        return f"dtype {spec.dtype}"
    if spec.dims not in (1, 2, 3):
        return f"{spec.dims} spatial dims"
    s = normalise(spec)
    if not all(len(t) == s.dims for t in (s.kernel, s.stride, s.padding, s.dilation, s.output_padding)):
        return "an argument of another rank than the input's spatial dims"
    if s.groups < 1 or s.cin % s.groups or s.cout % s.groups:
        return f"groups {s.groups} do not divide the channels"
    if s.groups > 65535:
        return "more than 65535 groups"
    if min(s.n, s.cin, s.cout, *s.size, *s.kernel, *s.stride, *s.dilation) < 1 or min(s.padding) < 0:
        return "an empty or negative size"
    if min(s.out_size) < 1:
        return "an empty output"
    if s.transposed and any(op >= max(st, d) for op, st, d in zip(s.output_padding, s.stride, s.dilation)):
        return "output padding not below stride or dilation"
    if not s.transposed and any(s.output_padding):
        return "output padding of a forward convolution"
    if s.precision not in PRECISIONS or (s.precision == "native") != (s.dtype != "float32"):
        return f"precision {s.precision} for {s.dtype}"
    if len(s.x_strides) != 2 + s.dims or len(s.out_strides) != 2 + s.dims:
        return "strides of another rank"
    for x in s.inputs:
        want = 1 if x.kind == "chan" else 2 + s.dims
        if x.name in RESERVED or not x.name.isidentifier() or x.kind not in KINDS or x.dtype not in DTYPES \
                or len(x.strides) != want:
            return f"epilogue input {x.name}"
    if s.pool and (s.pool not in ("max", "avg") or len(s.pool_window) != s.dims or math.prod(s.pool_window) not in (2, 4, 8)
                   or min(s.store_size) < 1 or s.pool_divisor < 0):
        return f"pool {s.pool} {s.pool_window}"
    if s.reduce and (s.reduce not in GLOBAL + CHANNEL or s.pool or len(s.red_strides) != 2
                     or (s.reduce_store and s.reduce in CHANNEL)):
        return f"reduction {s.reduce}"
    if s.reduce in CHANNEL and (s.groups != 1 or s.cout > max(TILES90)):
        return f"{s.reduce} over more channels than one tile holds ({s.cout} in {s.groups} groups)"
    if s.reduce in CHANNEL and any(t and t[1] < s.cout for t in (spec.sm80_tile, spec.sm90_tile)):
        return f"a tile narrower than the {s.cout} channels of the {s.reduce}"
    for x in s.inputs if s.pool or s.reduce else ():
        if x.kind != "chan" and x.name in s.post:
            return f"a full operand {x.name} after the {'pool' if s.pool else 'reduction'}"
    if spec.sm80_tile and tuple(spec.sm80_tile) not in TILES:
        return f"mma.sync tile {spec.sm80_tile}"
    if spec.sm90_tile and (spec.sm90_tile[0] not in (64, 128) or spec.sm90_tile[1] not in TILES90):
        return f"wgmma tile {spec.sm90_tile}"
    m = s.n * math.prod(s.out_size)
    if max(m, s.n * max(s.x_strides), s.cout) >= 1 << 31:
        return "more than 2^31 output pixels"
    return None


def red_bytes(spec: ConvSpec, bm: int, bn: int) -> int:
    """Shared memory of a reducing site's value tile (rows of BN + 1 floats, cuh/conv_reduce.cuh)."""
    return bm * (bn + 1) * 4 if spec.reduce else 0


def _pick_sm80(spec: ConvSpec, m: int, n: int) -> tuple[int, int, int, int, int]:
    if spec.sm80_tile:
        bm, bn, wm, wn = spec.sm80_tile
        return bm, bn, wm, wn, 3 if bm + bn > 128 else 4
    best = None
    for bm, bn, wm, wn in TILES:
        if spec.reduce in CHANNEL and bn < n:
            continue  # NOTE: the softmax's tile holds every channel
        blocks = math.ceil(m / bm) * math.ceil(n / bn) * spec.groups
        # NOTE: a lead, not a measurement: bigger tiles reuse each load more (eff); time ~ waves x tile work
        eff = {128: 1.0, 64: 0.8, 32: 0.6}[bn] * (1.0 if bm == 128 else 0.85)
        cost = math.ceil(blocks / spec.sms) * bm * bn / eff
        if best is None or cost < best[0]:
            best = (cost, bm, bn, wm, wn)
    _, bm, bn, wm, wn = best
    return bm, bn, wm, wn, 3 if bm + bn > 128 else 4


def _pick_sm90(spec: ConvSpec, m: int, n: int) -> tuple[int, int, int]:
    if spec.sm90_tile:
        bm, bn = spec.sm90_tile
    else:
        bn = next((b for b in TILES90 if b >= n), TILES90[-1])
        # NOTE: a lead, not a measurement: two consumer warpgroups where the grid still fills the machine
        bm = 128 if math.ceil(m / 128) * math.ceil(n / bn) * spec.groups >= spec.sms else 64
    stage = (bm + bn * (2 if spec.precision == "3xtf32" else 1)) * 128
    red = red_bytes(spec, bm, bn)  # NOTE: the reduction's value tile lies over the ring (cuh/conv_sm90.cuh)
    stages = max(s for s in range(2, 7) if s == 2 or max(s * stage, red) + 1024 <= SMEM_MAX)
    return bm, bn, stages


def plan(spec: ConvSpec) -> ConvPlan:
    """The plan of a supported site (raises ValueError with the reason otherwise)."""
    why = unsupported(spec)
    if why:
        raise ValueError(f"convolution site {spec.name}: unsupported: {why}")
    s = normalise(spec)
    g = s.groups
    cig, cog = s.cin // g, s.cout // g
    taps = math.prod(s.kernel)
    osz, psz, win = _pad3(s.out_size, 1), _pad3(s.store_size, 1), _pad3(tuple(s.pool_window) if s.pool else (), 1)
    # NOTE: pooled, only the outputs some window covers are rows: (pooled pixels) x (window)
    m, k = s.n * math.prod(psz) * math.prod(win), taps * cig
    xn, xc, *xsp = s.x_strides
    on, oc, *osp = s.out_strides
    xs = (xn, xc, *_pad3(tuple(xsp), 0))
    os_ = (on, oc, *_pad3(tuple(osp), 0))
    es = DTYPES[s.dtype][1]
    v = 16 // es
    # NOTE: a 16-byte chunk of A is V consecutive channels of one tap of one pixel: channels contiguous,
    # every group's first channel and every pixel's address 16-byte aligned.
    vec = xc == 1 and cig % v == 0 and all(x % v == 0 for x in xs[:1] + xs[2:])
    return ConvPlan(s, m, cog, k, cig, _pad3(s.size, 1), osz, _pad3(s.kernel, 1), _pad3(s.stride, 1),
                    _pad3(s.padding, 0), _pad3(s.dilation, 1), xs, os_, vec, _pick_sm80(s, m, cog),
                    _pick_sm90(s, m, cog) if vec else None, _phased(s, cig), win, psz)


def _phased(s: ConvSpec, cig: int) -> bool:
    """Rows by phase pay where a transposed convolution's stride leaves most taps reading zero; the k-tile
    skip needs every output size a multiple of its stride and each tap's channels whole k-tiles."""
    bk = 128 // DTYPES[s.dtype][1]
    return s.transposed and not (s.pool or s.reduce) and max(s.stride) > 1 \
        and all(o % st == 0 for o, st in zip(s.out_size, s.stride)) \
        and cig % bk == 0
