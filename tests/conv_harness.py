"""Convolution sites for tests and bench/conv.py: operands (the input with the spec's strides, the
weight in torch's layout and packed), the fp64 oracle (torch's own convolution in double), the call
through a built library's `tw_launch_<name>`, and the emulated build. The same code drives the CPU
emulator (tests/test_conv_emu.py) and the GPU (tests/gpu/test_conv_gpu.py)."""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from torchweld.codegen.conv_spec import ConvInput, ConvSpec, normalise
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
    n_out = 1 + sum((a - 1) * st for a, st in zip(oshape, s.out_strides))
    out = torch.full((n_out,), float("nan"), dtype=dt, device=device)
    ops["out"] = out, out.as_strided(oshape, s.out_strides)
    return ops


def oracle(case: Case, ops: dict) -> torch.Tensor:
    """The output in fp64 (n, c, spatial...), from the operands as the kernel sees them."""
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
    return case.epi(acc, views) + torch.zeros_like(acc)


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
         precision: str = "", tile: tuple | None = None) -> Case:
    """A Case from torch-like arguments (ints repeat over the dims); layouts "cl" (channels-last) or
    "nc" (contiguous NCHW); the epilogue adds bias, a folded batch norm (scale, shift), a residual of
    the output's shape (contiguous), then a ReLU, in that order, each where asked."""
    tup = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * dims  # noqa: E731
    s = ConvSpec(id, n=n, cin=cin, cout=cout, size=tup(size), kernel=tup(kernel), stride=tup(stride),
                 padding=tup(padding), dilation=tup(dilation), output_padding=tup(output_padding) if transposed else (),
                 groups=groups, transposed=transposed, dtype=dtype, precision=precision, sm80_tile=tile)
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
    os_ = None if out_layout == "cl" else _row_major(oshape)
    return Case(id, replace(s, inputs=tuple(inputs), epilogue=expr, x_strides=xs, out_strides=os_), epi)
