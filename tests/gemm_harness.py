"""GEMM sites for tests and bench/gemm.py: operands with the spec's strides (read in place), the fp64
oracle, the call through a built library's `tw_launch_<name>`, and the error measures. The same code
drives the CPU emulator (tests/test_gemm_codegen.py) and the GPU (tests/gpu/test_gemm_gpu.py)."""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from torchweld.codegen.gemm import EpilogueInput, GemmSpec, normalise
from torchweld.codegen.gemm_source import gemm_site, gemm_source

HERE = Path(__file__).resolve().parent
TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# NOTE: what the build of an emitted file with our GEMM must get on Hopper (load_inline's default
# builds for the device's plain sm_90, which has no wgmma); the sm_80 target is the portable main loop.
NVCC_SM90 = ["-gencode=arch=compute_90a,code=sm_90a"]
NVCC_SM80 = ["-gencode=arch=compute_80,code=sm_80"]


@dataclass(frozen=True)
class Case:
    """A site and its meaning in torch: `epi(acc, row, col, batch, inputs)` mirrors spec.epilogue,
    `post(r)` mirrors spec.reduce_expr (acc and r in fp64)."""
    id: str
    spec: GemmSpec
    epi: Callable = lambda acc, row, col, batch, x: acc
    post: Callable = lambda r: r
    shapes: dict = field(default_factory=dict)  # epilogue input name -> storage shape


def storage(shape_and_strides: tuple, batch_m_n: tuple) -> int:
    """Elements a strided tensor over `batch_m_n` reaches."""
    return 1 + sum((n - 1) * s for n, s in zip(batch_m_n, shape_and_strides))


def _strided(n_elems: int, sizes: tuple, strides: tuple, dtype, gen, fill="randn") -> tuple:
    draw = torch.randn if fill == "randn" else torch.rand
    base = draw(n_elems, generator=gen, dtype=torch.float32, device=gen.device).to(dtype)
    return base, base.as_strided(sizes, strides)


def operands(case: Case, seed: int = 0, device: str = "cpu", fill: str = "randn") -> dict:
    """Every buffer the launcher takes, as (storage, logical view): a, b, c, inputs; out and red poisoned with NaN."""
    s = normalise(case.spec)
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = TORCH_DTYPE[s.dtype]
    nb, m, n, k = s.batch, s.m, s.n, s.k
    ops = {"a": _strided(storage(s.a_strides, (nb, m, k)), (nb, m, k), s.a_strides, dt, gen, fill),
           "b": _strided(storage(s.b_strides, (nb, k, n)), (nb, k, n), s.b_strides, dt, gen, fill)}
    if s.c_strides:
        ops["c"] = _strided(storage(s.c_strides, (nb, m, n)), (nb, m, n), s.c_strides, dt, gen, fill)
    for x in s.inputs:
        ops[x.name] = _strided(storage(x.strides, (nb, m, n)), (nb, m, n), x.strides, TORCH_DTYPE[x.dtype], gen, fill)
    if s.store:
        out = torch.full((storage(s.out_strides, (nb, m, n)),), float("nan"), dtype=dt, device=device)
        ops["out"] = out, out.as_strided((nb, m, n), s.out_strides)
    if s.reduce:
        red = torch.full((storage(s.reduce_strides, (nb, m)),), float("nan"), dtype=dt, device=device)
        ops["red"] = red, red.as_strided((nb, m), s.reduce_strides)
    return ops


def oracle(case: Case, ops: dict) -> tuple:
    """(out, red) in fp64, on the operands' device, from the operands as the kernel sees them."""
    s = normalise(case.spec)
    a, b = ops["a"][1].double(), ops["b"][1].double()
    acc = torch.matmul(a, b) * s.alpha
    if s.c_strides and s.beta:
        acc = acc + s.beta * ops["c"][1].double()
    idx = lambda d: torch.arange(acc.shape[d], device=acc.device).view([-1 if i == d else 1 for i in range(3)])  # noqa: E731
    views = {x.name: ops[x.name][1].double() for x in s.inputs}
    out = case.epi(acc, idx(1), idx(2), idx(0), views) + torch.zeros_like(acc)
    red = None
    if s.reduce:
        red = {"sum": lambda v: v.sum(-1), "max": lambda v: v.amax(-1), "min": lambda v: v.amin(-1)}[s.reduce](out)
        red = case.post(red)
    return out, red


def bind(lib, case: Case, ops: dict, vec: int = 1, stream: int | None = None):
    """A function of no argument that launches the site on these operands (what bench/gemm.py times:
    the arguments are converted once, so a call costs what an emitted file's call costs)."""
    site = gemm_site(case.spec)
    fn = getattr(lib, "tw_launch_" + case.spec.name)
    fn.argtypes = [ctypes.c_void_p] * len(site.args) + [ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    args = [ops[a][0].data_ptr() for a in site.args] + [vec, stream]
    return lambda: fn(*args)


def call(lib, case: Case, ops: dict, vec: int = 1, stream: int | None = None) -> int:
    """tw_launch_<name>(pointers in the site's order, vec, stream); returns its cudaError_t."""
    return bind(lib, case, ops, vec, stream)()


def errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, int]:
    """(max abs error, ||got - ref|| / ||ref||, count of NaN where ref is finite: unwritten elements)."""
    got = got.double()
    unwritten = int((got.isnan() & ~ref.isnan()).sum())
    d = (got - ref).nan_to_num(0.0)
    return float(d.abs().max()), float(d.norm() / ref.norm().clamp_min(1e-300)), unwritten


# Relative error (Frobenius) each precision must meet against fp64 in the emulator and the GPU tests.
TOLERANCE = {"3xtf32": 2e-6, "1xtf32": 3e-3, "native": 1e-2}


# NOTE: -fno-gnu-unique: without it the loader merges the emulator's globals (inline variables,
# statics of templates) across the libraries one process loads, e.g. the cc 80 and cc 90 copies.
GXX_FLAGS = ["-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-fno-gnu-unique", f"-I{HERE}"]


def build_emu(specs: list[GemmSpec], out_dir: Path, cc: int = 90, rz: bool = False, seed: int = 1) -> ctypes.CDLL:
    """The sites' CUDA source built by g++ against tests/gemm_emu.h (cached by content), loaded as a
    device of compute capability `cc` (one load per cc: the launchers cache their path per device)."""
    src = gemm_source(specs, emu=True) + '#include "gemm_emu_check.h"\n'
    head = "".join((HERE / f).read_text() for f in ("gemm_emu.h", "gemm_emu_sm90.h", "gemm_emu_check.h"))
    key = hashlib.sha256((src + head).encode()).hexdigest()[:16]
    lib = out_dir / f"gemm_emu_{key}.so"
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
    so.twg_emu_check_layouts.restype = ctypes.c_long
    so.twg_emu_config(cc, int(rz), seed)
    return so


def col(name: str) -> EpilogueInput:
    return EpilogueInput(name, "col", (0, 0, 1))
