"""Convolution sites for tests and bench/conv.py: operands (the input with the spec's strides, the
weight in torch's layout and packed), the fp64 oracle (torch's own convolution in double), the call
through a built library's `tw_launch_<name>`, and the emulated build. The same code drives the CPU
emulator (tests/test_conv_emu.py) and the GPU (tests/gpu/test_conv_gpu.py)."""
from __future__ import annotations

import ctypes
import hashlib
import itertools
import random
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from torchweld.codegen.conv_spec import GLOBAL, TILES, TILES90, ConvInput, ConvSpec, normalise, plan
from torchweld.codegen.conv_source import conv_site, conv_source
from torchweld.runtime.conv_select import _tw_conv_pack

HERE = Path(__file__).resolve().parent
TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Relative error (Frobenius) each precision must meet against fp64.
TOLERANCE = {"3xtf32": 2e-6, "1xtf32": 3e-3, "native": 1e-2}


@dataclass(frozen=True)
class Case:
    """A site and its meaning in torch: `epi(acc, inputs)` mirrors spec.epilogue over the output
    (n, c, spatial...) in fp64; `shapes`: each full input's storage shape (chan inputs: [cout])."""
    id: str
    spec: ConvSpec
    epi: Callable = lambda acc, x: acc
    post: Callable = lambda v, x: v  # after the pool (spec.post)


def _strided(shape, strides, dtype, gen, device):
    n = 1 + sum((a - 1) * s for a, s in zip(shape, strides))
    base = torch.randn(n, generator=gen, dtype=torch.float32, device=device).to(dtype)
    return base, base.as_strided(shape, strides)


def operands(case: Case, seed: int = 0, device: str = "cpu") -> dict:
    """name -> (storage, logical view): x, w (torch's layout), wp (packed), inputs, out (NaN)."""
    s = normalise(case.spec)
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = TORCH_DTYPE[s.dtype]
    xshape = (s.n, s.cin, *s.size)
    oshape = (s.n, s.cout, *s.out_size)
    sshape = (s.n, s.store_channels, *s.store_size)
    ops = {"x": _strided(xshape, s.x_strides, dt, gen, device)}
    w = torch.randn(s.weight_shape, generator=gen, dtype=torch.float32, device=device).to(dt)
    ops["w"] = w, w
    wp = _tw_conv_pack(w, s.groups, s.transposed)
    ops["wp"] = wp, wp
    for x in s.inputs:
        if x.kind == "chan":
            ops[x.name] = _strided((s.cout,), x.strides, TORCH_DTYPE[x.dtype], gen, device)
        else:
            ops[x.name] = _strided(oshape, x.strides, TORCH_DTYPE[x.dtype], gen, device)
    n_out = 1 + sum((a - 1) * st for a, st in zip(sshape, s.out_strides))
    out = torch.full((n_out,), float("nan"), dtype=dt, device=device)
    ops["out"] = out, out.as_strided(sshape, s.out_strides)
    if s.reduce in GLOBAL:  # the reduced (n, c) result and the workspace, both NaN
        red = torch.full((1 + (s.n - 1) * s.red_strides[0] + (s.cout - 1) * s.red_strides[1],), float("nan"), dtype=dt,
                         device=device)
        ops["red"] = red, red.as_strided((s.n, s.cout), s.red_strides)
        ws = torch.full((plan(s).ws,), float("nan"), dtype=torch.float32, device=device)
        ops["ws"] = ws, ws
    return ops


def result(case: Case) -> str:
    """The operand holding what the site computes: the reduced result of a pixel reduction, else the output."""
    return "red" if case.spec.reduce in GLOBAL else "out"


def oracle(case: Case, ops: dict, full: bool = False) -> torch.Tensor:
    """The output in fp64 (n, c, spatial...), from the operands as the kernel sees them (a reducing site: its
    result, or with `full` the values it reduces)."""
    s = normalise(case.spec)
    x, w = ops["x"][1].double(), ops["w"][1].double()
    if s.transposed:
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[s.dims]
        acc = fn(x, w, None, s.stride, s.padding, s.output_padding, s.groups, s.dilation)
    else:
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[s.dims]
        acc = fn(x, w, None, s.stride, s.padding, s.dilation, s.groups)
    views = {x.name: ops[x.name][1].double() for x in s.inputs}
    for x in s.inputs:
        if x.kind == "chan":
            views[x.name] = views[x.name].view(1, -1, *([1] * s.dims))
    out = pooled(case, case.epi(acc, views) + torch.zeros_like(acc), views)
    return out if full else reduced(case, out, views)


def reduced(case: Case, out: torch.Tensor, views: dict) -> torch.Tensor:
    """`out` reduced as the spec says (over the pixels: (n, c); over the channels: softmax's shape), then
    the ops after it (`out` itself where it has no reduction)."""
    s = normalise(case.spec)
    if not s.reduce:
        return out
    dims = tuple(range(2, out.dim()))
    if s.reduce in GLOBAL:
        fn = {"sum": lambda v: v.sum(dims), "mean": lambda v: v.mean(dims), "max": lambda v: v.amax(dims),
              "min": lambda v: v.amin(dims)}[s.reduce]
        return case.post(fn(out), {k: v.view(1, -1) if v.dim() == out.dim() and v.shape[0] == 1 and v.numel() == s.cout
                                    else v for k, v in views.items()})
    if s.reduce.startswith("chan_"):
        fn = {"chan_sum": lambda v: v.sum(1, True), "chan_mean": lambda v: v.mean(1, True),
              "chan_max": lambda v: v.amax(1, True), "chan_min": lambda v: v.amin(1, True)}[s.reduce]
        return case.post(fn(out), views)
    return case.post(torch.softmax(out, 1) if s.reduce == "softmax" else torch.log_softmax(out, 1), views)


def pooled(case: Case, out: torch.Tensor, views: dict) -> torch.Tensor:
    """`out` pooled as the spec says, then the ops after the pool (`out` itself where it has no pool)."""
    s = normalise(case.spec)
    if not s.pool:
        return out
    fn = {"max": F.max_pool3d, "avg": F.avg_pool3d}[s.pool]
    w = (1,) * (3 - s.dims) + tuple(s.pool_window)
    kw = {"divisor_override": s.pool_divisor} if s.pool == "avg" and s.pool_divisor else {}
    out = fn(out.reshape(s.n, s.cout, *((1,) * (3 - s.dims)), *out.shape[2:]), w, w, **kw).reshape(s.n, s.cout, *s.store_size)
    return case.post(out, views)


def bind(lib, case: Case, ops: dict, vec: int = 1, stream: int | None = None):
    """A function of no argument launching the site on these operands (what bench/conv.py times)."""
    site = conv_site(case.spec)
    fn = getattr(lib, "tw_launch_" + case.spec.name)
    fn.argtypes = [ctypes.c_void_p] * len(site.args) + [ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    names = {"w": "wp"}
    args = [ops[names.get(a, a)][0].data_ptr() for a in site.args] + [vec, stream]
    return lambda: fn(*args)


def errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, int]:
    """(max abs error, ||got - ref|| / ||ref||, count of NaN where ref is finite: unwritten elements)."""
    got = got.double()
    unwritten = int((got.isnan() & ~ref.isnan()).sum())
    d = (got - ref).nan_to_num(0.0)
    return float(d.abs().max()), float(d.norm() / ref.norm().clamp_min(1e-300)), unwritten


GXX_FLAGS = ["-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-fno-gnu-unique", f"-I{HERE}"]


def build_emu(specs: list[ConvSpec], out_dir: Path, cc: int = 80, seed: int = 1, head: str = "") -> ctypes.CDLL:
    """The sites' CUDA source built by g++ against tests/gemm_emu.h (cached by content), as a device
    of compute capability `cc`."""
    src = head + conv_source(specs, emu=True)
    deps = "".join((HERE / f).read_text() for f in ("gemm_emu.h", "gemm_emu_sm90.h"))
    key = hashlib.sha256((src + deps).encode()).hexdigest()[:16]
    lib = out_dir / f"conv_emu_{key}.so"
    if not lib.exists():
        cpp = lib.with_suffix(".cc")
        cpp.write_text(src)
        proc = subprocess.run([shutil.which("g++") or "g++", *GXX_FLAGS, str(cpp), "-o", str(lib)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"g++ failed on {cpp}:\n{proc.stderr[-4000:]}")
    copy = lib.with_name(f"{lib.stem}_cc{cc}.so")
    if not copy.exists():
        shutil.copy(lib, copy)
    so = ctypes.CDLL(str(copy))
    so.twg_emu_config.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint]
    so.twg_emu_error.restype = ctypes.c_char_p
    so.twg_emu_config(cc, 0, seed)
    return so


def emulators(tmp_path_factory, folder: str, cases: list) -> dict:
    """{cc: the emulated library of `cases`' sites} for cc 8.0 and 9.0 (a module fixture's body; skips without g++)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    out = tmp_path_factory.mktemp(folder)
    return {cc: build_emu([c.spec for c in cases], out, cc=cc) for cc in (80, 90)}


def _row_major(shape: tuple) -> tuple:
    st, acc = [], 1
    for d in reversed(shape):
        st.insert(0, acc)
        acc *= d
    return tuple(st)


def site(id: str, dims: int = 2, transposed: bool = False, dtype: str = "float32", n: int = 2, cin: int = 8,
         cout: int = 16, size: int | tuple = 6, kernel: int | tuple = 3, stride: int | tuple = 1, padding: int | tuple = 0,
         dilation: int | tuple = 1, output_padding: int | tuple = 0, groups: int = 1, bias: bool = False,
         bn: bool = False, residual: bool = False, relu: bool = False, x_layout: str = "cl", out_layout: str = "cl",
         precision: str = "", tile: tuple | None = None, tile90: tuple | None = None, pool: str = "",
         window: int | tuple = 2, divisor: int = 0, post_scale: bool = False, reduce: str = "", store: bool = False,
         red_layout: str = "nc") -> Case:
    """A Case from torch-like arguments (ints repeat over the dims); layouts "cl" (channels-last) or
    "nc" (contiguous NCHW); the epilogue adds bias, a folded batch norm (scale, shift), a residual of
    the output's shape (contiguous), then a ReLU, in that order, each where asked."""
    tup = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * dims  # noqa: E731
    s = ConvSpec(id, n=n, cin=cin, cout=cout, size=tup(size), kernel=tup(kernel), stride=tup(stride),
                 padding=tup(padding), dilation=tup(dilation), output_padding=tup(output_padding) if transposed else (),
                 groups=groups, transposed=transposed, dtype=dtype, precision=precision, sm80_tile=tile,
                 sm90_tile=tile90)
    oshape = (n, cout, *s.out_size)
    inputs, expr, steps = [], "acc", []
    if bias:
        inputs.append(ConvInput("bias", "chan", (1,), dtype))
        expr = f"({expr} + bias[c])"
        steps.append(lambda a, x: a + x["bias"])
    if bn:
        inputs += [ConvInput("scale", "chan", (1,)), ConvInput("shift", "chan", (2,))]
        expr = f"({expr} * scale[c] + shift[c])"
        steps.append(lambda a, x: a * x["scale"] + x["shift"])
    if residual:
        inputs.append(ConvInput("res", "full", _row_major(oshape), dtype))
        expr = f"({expr} + res(q, c))"
        steps.append(lambda a, x: a + x["res"])
    if relu:
        expr = f"fmaxf({expr}, 0.f)"
        steps.append(lambda a, x: a.clamp_min(0))

    def epi(a, x):
        for f in steps:
            a = f(a, x)
        return a
    xs = None if x_layout == "cl" else _row_major((n, cin, *tup(size)))
    post, post_fn = "v", (lambda v, x: v)
    if pool:
        s = replace(s, pool=pool, pool_window=tup(window), pool_divisor=divisor)
        oshape = (n, cout, *s.store_size)
        if post_scale:  # a per-channel scale and a ReLU after the pool
            inputs.append(ConvInput("gain", "chan", (1,)))
            post, post_fn = "fmaxf(v * gain[c], 0.f)", (lambda v, x: (v * x["gain"]).clamp_min(0))
    if reduce:  # a pixel or channel reduction, then (post_scale) a per-channel scale and a ReLU
        s = replace(s, reduce=reduce, reduce_store=store, red_strides=(1, n) if red_layout == "cn" else ())
        if post_scale:
            inputs.append(ConvInput("gain", "chan", (1,)))
            post, post_fn = "fmaxf(v * gain[c], 0.f)", (lambda v, x: (v * x["gain"]).clamp_min(0))
        oshape = (n, s.store_channels, *s.out_size)
    os_ = None if out_layout == "cl" else _row_major(oshape)
    return Case(id, replace(s, inputs=tuple(inputs), epilogue=expr, x_strides=xs, out_strides=os_, post=post), epi, post_fn)


def sweep() -> list:
    """Small sites of every setting class (the emulator's and the GPU test's sweep)."""
    cases = []
    for dims in (1, 2, 3):
        size = {1: 11, 2: 6, 3: (3, 4, 5)}[dims]
        for tr in (False, True):
            t = "t" if tr else "f"
            op = dict(output_padding=1) if tr else {}
            cases += [
                site(f"{t}{dims}_basic", dims, tr, size=size, padding=1),
                site(f"{t}{dims}_s2", dims, tr, size=size, stride=2, **op),
                site(f"{t}{dims}_dil", dims, tr, size=size, dilation=2, padding=2, bias=True),
                site(f"{t}{dims}_groups", dims, tr, size=size, cin=8, cout=12, groups=4, padding=1, stride=2, relu=True),
                site(f"{t}{dims}_dw", dims, tr, size=size, cin=8, cout=8, groups=8, padding=1),
                site(f"{t}{dims}_odd", dims, tr, size=size, cin=3, cout=5, kernel=2, stride=(2,) * dims,
                     bias=True, x_layout="nc", out_layout="nc"),
                site(f"{t}{dims}_h16", dims, tr, "float16", size=size, padding=1, bias=True, residual=True, relu=True),
                site(f"{t}{dims}_b16", dims, tr, "bfloat16", size=size, stride=2, bn=True, **op),
                site(f"{t}{dims}_1x", dims, tr, size=size, kernel=1, precision="1xtf32", out_layout="nc"),
            ]
    cases += [  # the mixed settings of one dim each, and every tile
        site("f2_mixed", 2, False, size=(9, 7), kernel=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
             groups=2, cin=8, cout=8, bias=True, bn=True, residual=True, relu=True, x_layout="nc"),
        site("t2_mixed", 2, True, size=(4, 5), kernel=(3, 2), stride=(3, 2), padding=(1, 0), dilation=(2, 1),
             output_padding=(1, 0), groups=2, cin=8, cout=6, bias=True, residual=True),
        site("t2_op_dil", 2, True, size=5, kernel=2, stride=1, dilation=3, output_padding=2, cin=4, cout=4),
        site("f2_pad_big", 2, False, size=4, kernel=3, padding=3, stride=3, cin=4, cout=4),
        site("f2_k_tail", 2, False, "float16", size=5, kernel=3, cin=24, cout=40, padding=1),
        site("f2_ncl_h16", 2, False, "float16", size=5, kernel=3, cin=16, cout=16, x_layout="nc", out_layout="nc"),
    ]
    cases += [  # transposed with rows ordered by phase (taps reading zero skipped); tiles of one and of two phases
        site("p2_phased", 2, True, size=5, kernel=3, stride=2, padding=1, output_padding=1, cin=32, cout=16, bias=True),
        site("p2_phased_k4", 2, True, n=2, size=8, kernel=4, stride=2, padding=1, cin=32, cout=24, relu=True),
        site("p1_phased_dil", 1, True, size=9, kernel=5, stride=2, dilation=3, padding=3, output_padding=1, cin=32, cout=8),
        site("p2_phased_gt", 2, True, "float16", size=4, kernel=2, stride=3, output_padding=1, cin=64, cout=8, bias=True),
        site("p3_phased_h16", 3, True, "float16", size=(2, 3, 4), kernel=2, stride=2, cin=64, cout=16, residual=True),
        site("p3_phased_hw", 3, True, size=(3, 3, 2), kernel=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1),
             output_padding=(0, 1, 1), cin=64, cout=16, groups=2, precision="1xtf32"),
    ]
    cases += [  # a non-overlapping pool in the epilogue (windows of 2, 4, 8; floor mode drops outputs), then post ops
        site("pool_max2d", 2, False, size=(7, 9), padding=1, cin=8, cout=16, bias=True, relu=True, pool="max"),
        site("pool_avg2d_post", 2, False, size=(8, 8), padding=1, cin=8, cout=24, pool="avg", window=(2, 4),
             post_scale=True, out_layout="nc"),
        site("pool_max1d_res", 1, False, size=19, padding=2, kernel=5, cin=8, cout=16, pool="max", window=4, residual=True),
        site("pool_avg3d_h16", 3, False, "float16", size=(4, 5, 6), padding=1, cin=16, cout=8, pool="avg", window=(1, 2, 1), divisor=3),
        site("pool_max_t2", 2, True, size=5, stride=2, output_padding=1, cin=32, cout=16, pool="max", window=(1, 2)),
        site("pool_max_w90", 2, False, n=2, size=(9, 8), cin=64, cout=120, padding=1, pool="max", tile90=(128, 128),
             bias=True, x_layout="nc"),
        site("pool_max_2x2x2", 3, False, size=(4, 4, 5), padding=1, cin=8, cout=16, pool="max", window=2, tile90=(128, 16)),
    ]
    cases += [  # reductions in the epilogue: over every pixel of an image (tiles reaching one, two or several
        # images: odd sizes, tails), stored too or not; softmax over the channels (one tile holds them all)
        site("red_mean2d", 2, False, n=3, size=(7, 9), padding=1, cin=8, cout=16, bias=True, relu=True, reduce="mean",
             tile=(128, 64, 32, 32)),
        site("red_sum1d_groups", 1, False, n=3, size=37, kernel=3, cin=8, cout=12, groups=2, reduce="sum", post_scale=True),
        site("red_max3d_store", 3, False, size=(3, 4, 5), padding=1, cin=8, cout=16, residual=True, reduce="max",
             store=True, red_layout="cn", out_layout="nc"),
        site("red_min_t2_h16", 2, True, "float16", size=5, stride=2, output_padding=1, cin=32, cout=16, bias=True,
             reduce="min"),
        site("red_mean_b16_bn", 2, False, "bfloat16", n=6, size=5, padding=1, cin=16, cout=24, bn=True, reduce="mean"),
        site("red_mean_big", 2, False, n=2, size=(13, 12), padding=1, cin=64, cout=120, bias=True, reduce="mean",
             tile=(128, 128, 64, 32), tile90=(128, 128), store=True),
        site("red_sum_w64", 2, False, n=3, size=(9, 7), padding=1, cin=64, cout=40, reduce="sum", tile90=(64, 32),
             precision="1xtf32"),
        site("sm_softmax2d", 2, False, n=2, size=(7, 9), padding=1, cin=8, cout=24, bias=True, reduce="softmax",
             post_scale=True, out_layout="nc"),
        site("sm_log1d_h16", 1, False, "float16", size=29, kernel=3, cin=24, cout=40, reduce="log_softmax"),
        site("sm_softmax3d", 3, False, size=(3, 4, 5), padding=1, cin=8, cout=16, residual=True, reduce="softmax"),
        site("sm_softmax_t2", 2, True, size=5, stride=2, output_padding=1, cin=32, cout=21, reduce="softmax", out_layout="nc"),
        site("sm_softmax_w90", 2, False, n=2, size=(9, 8), padding=1, cin=64, cout=100, bias=True, reduce="softmax",
             tile90=(128, 128)),
        site("ch_max2d", 2, False, n=2, size=(7, 9), padding=1, cin=8, cout=48, bias=True, reduce="chan_max", out_layout="nc"),
        site("ch_mean1d_h16", 1, False, "float16", size=29, kernel=3, cin=16, cout=24, relu=True, reduce="chan_mean"),
        site("ch_sum3d", 3, False, size=(3, 4, 5), padding=1, cin=8, cout=16, residual=True, reduce="chan_sum",
             out_layout="nc"),
        site("ch_min_t2_w90", 2, True, size=5, stride=2, output_padding=1, cin=64, cout=120, reduce="chan_min",
             tile90=(128, 128)),
    ]
    cases += [site(f"tile_{bm}x{bn}", 2, False, n=3, size=7, cin=16, cout=bn + 8, padding=1, tile=(bm, bn, wm, wn),
                   bias=True) for bm, bn, wm, wn in TILES]
    # every wgmma tile, K over more k-tiles than stages: 3xTF32 (A from registers, fold), 1xTF32 and fp16 (pipelined)
    for (dt, prec), bm, bn in itertools.product((("float32", ""), ("float32", "1xtf32"), ("float16", "")), (64, 128), TILES90):
        if (bm == 128) == (bn in (16, 64)):
            continue
        tag = {"": "3x", "1xtf32": "1x"}[prec] if dt == "float32" else "h16"
        cases.append(site(f"w90_{tag}_{bm}x{bn}", 2, False, dt, n=2, size=(9, 8), cin=64, cout=bn - 8, padding=1,
                          precision=prec, tile90=(bm, bn), residual=True))
    return cases


def random_sites(seed: int, count: int) -> list:
    """Up to `count` small sites drawn from a fixed seed (settings, dtypes, layouts, epilogues)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        dims, tr = rng.choice((1, 2, 2, 3)), rng.random() < 0.4
        g = rng.choice((1, 1, 2, 3))
        k = tuple(rng.choice((1, 2, 3)) for _ in range(dims))
        st = tuple(rng.choice((1, 2, 3)) for _ in range(dims))
        dil = tuple(rng.choice((1, 1, 2)) for _ in range(dims))
        pad = tuple(rng.randint(0, 2) for _ in range(dims))
        opad = tuple(rng.randint(0, max(s, d) - 1) for s, d in zip(st, dil)) if tr else 0
        size = tuple(rng.randint(2, {1: 12, 2: 6, 3: 4}[dims]) for _ in range(dims))
        dt = rng.choice(("float32", "float32", "float16", "bfloat16"))
        try:
            c = site(f"rand{i}", dims, tr, dt, n=rng.randint(1, 2), cin=g * rng.choice((1, 4, 8)), cout=g * rng.choice((2, 4, 8)),
                     size=size, kernel=k, stride=st, padding=pad, dilation=dil, output_padding=opad, groups=g,
                     bias=rng.random() < 0.5, relu=rng.random() < 0.5, x_layout=rng.choice(("cl", "nc")),
                     out_layout=rng.choice(("cl", "nc")))
            plan(c.spec)
        except ValueError:
            continue  # an empty output: drawn again below
        out.append(c)
    return out
