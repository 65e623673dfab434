"""Our GEMM kernel kind on the CPU (no GPU here): the generated source compiles with nvcc for sm_90a
and sm_80 without local-memory spills; both main loops run on the CPU emulator (tests/gemm_emu.h:
mma.sync, wgmma, cp.async, TMA and mbarriers by their documented semantics) against fp64 on small odd
shapes; the tile layouts agree with the documented descriptor and TMA layouts; the 3xTF32 split
arithmetic meets the issue's accuracy bound; bench/gemm.py's CLI works without a GPU."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gemm_harness import GXX_FLAGS, NVCC_SM80, NVCC_SM90, TOLERANCE, Case, build_emu, call, col, errors, operands, oracle
from helpers import sweep_ways
from torchweld.codegen.gemm import EpilogueInput as X
from torchweld.codegen.gemm import GemmSpec as G
from torchweld.codegen.gemm import plan, unsupported
from torchweld.codegen.gemm_source import gemm_site, gemm_source

ROOT = Path(__file__).resolve().parents[1]
NVCC = shutil.which("nvcc")
# What torch.utils.cpp_extension adds to every CUDA build (its COMMON_NVCC_FLAGS), as an emitted file gets.
TORCH_NVCC = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]
GXX = shutil.which("g++")


def T(m: int, k: int) -> tuple:
    """Strides of a [k, m] row-major matrix read in place as [m, k] (a transposed operand)."""
    return (m * k, 1, m)


# Small odd shapes: edges in M and N, K tails, transposes, batches, epilogues, reductions; the `big`
# ones force the large tiles (2 consumer warpgroups, BN 256), whose code differs.
CASES = [
    Case("f32_odd", G("f32_odd", 37, 45, 29)),  # strides not 16-byte multiples: mma.sync only
    Case("f32_tail", G("f32_tail", 100, 76, 300)),  # 10 k-tiles wrap the 6-stage ring
    Case("f32_bt", G("f32_bt", 70, 136, 100, b_strides=(0, 1, 100))),  # linear: B = W^T, K-major
    Case("f32_at", G("f32_at", 72, 60, 44, a_strides=T(72, 44))),
    Case("f32_bmm", G("f32_bmm", 40, 72, 36, batch=3)),
    Case("f32_bcast", G("f32_bcast", 40, 64, 36, batch=2, a_strides=(0, 36, 1))),
    Case("tf32_ss", G("tf32_ss", 130, 68, 100, precision="1xtf32", b_strides=(0, 1, 100))),
    Case("f16", G("f16", 96, 136, 200, dtype="float16")),
    Case("f16_tt", G("f16_tt", 72, 80, 48, dtype="float16", a_strides=T(72, 48), b_strides=(0, 1, 48))),
    Case("bf16_bmm", G("bf16_bmm", 64, 72, 80, batch=2, dtype="bfloat16", b_strides=(0, 72, 1))),
    Case("bias_relu", G("bias_relu", 50, 68, 40, epilogue="fmaxf(acc + bias[col], 0.f)", inputs=(col("bias"),)),
         epi=lambda a, r, c, b, x: torch.clamp_min(a + x["bias"], 0)),
    Case("addmm", G("addmm", 52, 64, 24, alpha=0.5, beta=2.0, c_strides=(0, 0, 1),
                    epilogue="acc * scale[row] + res(row, col)",
                    inputs=(X("scale", "row", (0, 1, 0)), X("res", "full", (0, 64, 1)))),
         epi=lambda a, r, c, b, x: a * x["scale"] + x["res"]),
    Case("rowsum", G("rowsum", 60, 150, 40, reduce="sum", store=False)),
    Case("rowmax", G("rowmax", 33, 200, 36, reduce="max", reduce_expr="r * 2.f", epilogue="acc + bias[col]",
                     inputs=(col("bias"),)), epi=lambda a, r, c, b, x: a + x["bias"], post=lambda r: r * 2),
    Case("out_strided", G("out_strided", 40, 48, 32, out_strides=(0, 100, 2))),
    Case("matvec", G("matvec", 90, 1, 64)),
    Case("vecmat", G("vecmat", 1, 72, 64)),
    Case("vecmat_f16", G("vecmat_f16", 2, 136, 72, dtype="float16", batch=2)),  # 8-wide tiles of B^T A^T
    Case("f32_big", G("f32_big", 136, 140, 72, sm90_tile=(128, 128), sm80_tile=(128, 128, 64, 32))),
    Case("f32_big_bt", G("f32_big_bt", 130, 132, 100, batch=2, a_strides=(0, 100, 1), b_strides=(0, 1, 100),
                         sm90_tile=(128, 128))),
    Case("tf32_kn", G("tf32_kn", 130, 200, 300, precision="1xtf32", sm90_tile=(128, 256), swap=False)),  # converter + SS
    Case("f32_hi_rna", G("f32_hi_rna", 72, 136, 100, batch=2, tf32_hi="rna")),  # the converter writes B's hi too
    Case("f32_noswap", G("f32_noswap", 136, 140, 72, sm90_tile=(128, 128), swap=False)),  # converter: hi and lo
    Case("tf32_big_nn", G("tf32_big_nn", 132, 200, 72, precision="1xtf32", a_strides=T(132, 72), sm90_tile=(128, 256))),
    Case("f16_big", G("f16_big", 136, 264, 200, dtype="float16", a_strides=T(136, 200), sm90_tile=(128, 256))),
    Case("bf16_big", G("bf16_big", 130, 256, 136, dtype="bfloat16", b_strides=(0, 1, 136), sm90_tile=(64, 256))),
    Case("rowmax_big", G("rowmax_big", 140, 200, 100, reduce="max", sm90_tile=(128, 128), sm80_tile=(128, 64, 16, 64))),
]
IDS = [c.id for c in CASES]


def _random_specs(seed: int, count: int) -> list[Case]:
    """Sites drawn at random (a fixed seed): dtype, precision, odd or aligned sizes, transposes,
    batches with a broadcast A, row reductions, forced tiles, no transposed problem."""
    import random
    rng = random.Random(seed)
    out = []
    for i in range(count):
        dt = rng.choice(["float32", "float32", "float16", "bfloat16"])
        prec = rng.choice(["3xtf32", "3xtf32", "1xtf32"]) if dt == "float32" else ""
        al = 4 if dt == "float32" else 8
        m, n, k = (rng.choice([rng.randint(1, 150), al * rng.randint(1, 40)]) for _ in range(3))
        nb = rng.choice([1, 1, 2, 3])
        at, bt = rng.random() < 0.4, rng.random() < 0.4
        a = (m * k if nb > 1 else 0, 1, m) if at else None
        if nb > 1 and rng.random() < 0.3:
            a = (0, *((1, m) if at else (k, 1)))
        red = rng.choice([None, None, None, "sum", "max"])
        kw = dict(dtype=dt, precision=prec, a_strides=a, b_strides=(k * n if nb > 1 else 0, 1, k) if bt else None,
                  batch=nb, reduce=red, store=red is None or rng.random() < 0.5, swap=False if rng.random() < 0.2 else None)
        if rng.random() < 0.3:
            kw["sm90_tile"] = rng.choice([(64, 64), (64, 128), (128, 128), (128, 64)] + ([(128, 256), (64, 256)] if prec != "3xtf32" else []))
        out.append(Case(f"rnd{i}", G(f"rnd{i}", m, n, k, **kw)))
    return out


RANDOM = _random_specs(2026, 12)
# Compiled with nvcc: the main configurations (and what they were chosen for).
NVCC_SPECS = [
    G("n_f32", 4096, 4096, 4096),  # 3xTF32 128x128, B N-major: converter writes hi and lo
    G("n_f32_lin", 4096, 4096, 4096, b_strides=(0, 1, 4096)),  # 3xTF32, B K-major: lo only
    G("n_tf32", 4096, 4096, 4096, precision="1xtf32", b_strides=(0, 1, 4096)),  # 1xTF32 SS 128x256
    G("n_f16", 4096, 4096, 4096, dtype="float16", a_strides=T(4096, 4096)),  # fp16 SS, transposed A
    G("n_bf16_bmm", 1024, 1024, 1024, batch=8, dtype="bfloat16"),
    G("n_red", 4096, 2048, 1024, reduce="sum", store=False, epilogue="fmaxf(acc + bias[col], 0.f)",
      inputs=(col("bias"),)),
]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Start the nvcc builds (sm_90a, sm_80, bench/gemm.py --dry-run) at once; the emulator's g++ build
    runs meanwhile (fixture `emu`); each test waits on what it needs."""
    out = tmp_path_factory.mktemp("gemm")
    cu = out / "sites.cu"
    cu.write_text(gemm_source(NVCC_SPECS))
    procs = {}
    pipe = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if NVCC:
        for arch, flags in (("sm90a", NVCC_SM90), ("sm80", NVCC_SM80)):
            procs[arch] = subprocess.Popen([NVCC, *flags, *TORCH_NVCC, "-std=c++17", "-O3", "-lineinfo", "-cubin", "-Xptxas", "-v", str(cu),
                                            "-o", str(out / f"{arch}.cubin")], **pipe)
        procs["bench"] = subprocess.Popen([sys.executable, str(ROOT / "bench" / "gemm.py"), str(out / "bench"),
                                           "--dry-run", "--only", "irr_odd_3x", "--jobs", "1"], **pipe)
    return out, procs


def _nvcc(builds, arch) -> str:
    out, procs = builds
    if arch not in procs:
        pytest.skip("nvcc not installed")
    log = procs[arch].communicate()[0]
    assert procs[arch].returncode == 0, log[-3000:]
    return log


@pytest.fixture(scope="module")
def emu(builds):
    if GXX is None:
        pytest.skip("g++ not installed")
    return {cc: build_emu([c.spec for c in CASES + RANDOM], builds[0], cc=cc) for cc in (80, 90)}


@pytest.mark.parametrize("arch", ["sm90a", "sm80"])
def test_nvcc_builds_without_spills(builds, arch):
    """Every kernel of the main configurations compiles with a zero-byte stack frame (no local memory);
    the wgmma kernels (empty bodies in the sm_80 build) start at the register cap (setmaxnreg), and
    ptxas neither serialises wgmma nor inserts waits (C7517, C7518) nor ignores setmaxnreg (C7508)."""
    log = _nvcc(builds, arch)
    assert not re.findall(r"C75(07|08|17|18)[^\n]*", log), re.findall(r"C75\d\d[^\n]*", log)
    kernels = re.findall(r"Function properties for (\w+)\n\s+(\d+) bytes stack frame, (\d+) bytes spill stores", log)
    assert len(kernels) == 3 * len(NVCC_SPECS), log[-2000:]  # 2 mma.sync (vector, element loads) + 1 wgmma
    assert [k for k, frame, spill in kernels if frame != "0" or spill != "0"] == []
    if arch == "sm90a":  # two consumer warpgroups: 168 registers at entry, setmaxnreg moves them
        regs = re.findall(r"Compiling entry function '_Z8twg_sm90I\d+twg_site_\w+?Li(\d+)E\w*' for 'sm_90a'.*?"
                          r"Used (\d+) registers", log, re.S)
        assert len(regs) == len(NVCC_SPECS) and all(r == "168" for bm, r in regs if bm == "128"), regs


def test_layouts_match_documented_tma_and_wgmma(emu):
    """twg_tile_off (the kernels' tile addresses) == the TMA box layout == the wgmma descriptor layout,
    for K-major and MN-major tiles of 64, 128 and 256 rows, fp32 and 16-bit (tests/gemm_emu_check.h)."""
    assert emu[90].twg_emu_check_layouts() == 0


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_emulated_kernel_matches_fp64":
        sweep_ways(metafunc, "case, cc", CASES + RANDOM, [(80,), (90,)], IDS + [c.id for c in RANDOM])


def test_emulated_kernel_matches_fp64(emu, case, cc):
    """The generated kernel run on the CPU emulator, output poisoned with NaN: every element written,
    nothing written outside the view (strided outputs), the error within the precision's tolerance."""
    lib = emu[cc]
    ops = operands(case, seed=cc)
    err = call(lib, case, ops, vec=1)
    assert err == 0, lib.twg_emu_error().decode()
    p = plan(case.spec)
    assert getattr(lib, f"tw_gemm_path_{case.spec.name}")() == (90 if cc == 90 and p.sm90 else 80)
    out, red = oracle(case, ops)
    tol = TOLERANCE[p.spec.precision]
    if case.spec.store:
        got, view = ops["out"]
        max_err, rel, unwritten = errors(view, out)
        assert unwritten == 0 and rel < tol, (max_err, rel, unwritten)
        outside = torch.ones_like(got, dtype=torch.bool)
        outside.as_strided(view.shape, view.stride()).fill_(False)
        assert got[outside].isnan().all(), "written outside the output view"
    if case.spec.reduce:
        max_err, rel, unwritten = errors(ops["red"][1], red)
        assert unwritten == 0 and rel < tol, (max_err, rel, unwritten)


@pytest.mark.parametrize("case", [c for c in CASES if c.id in ("f32_tail", "f16_tt", "rowsum")], ids=lambda c: c.id)
def test_unaligned_pointers_take_the_element_loader(emu, case):
    """vec=0 (a pointer not 16-byte aligned): the mma.sync kernel with element loads, on any device."""
    ops = operands(case, seed=7)
    assert call(emu[90], case, ops, vec=0) == 0
    out, red = oracle(case, ops)
    got, ref = (ops["out"][1], out) if case.spec.store else (ops["red"][1], red)
    assert errors(got, ref)[1] < TOLERANCE[plan(case.spec).spec.precision]


def test_emulator_is_not_blind(builds):
    """A kernel with one wgmma descriptor off (k-steps 16 bytes apart, not 32) fails in the emulator."""
    case = next(c for c in CASES if c.id == "f32_big_bt")
    src = gemm_source([case.spec], emu=True)
    good = "twg_desc(tile + 32 * j, 16, 1024)"
    assert good in src
    d = builds[0] / "mutant"
    d.mkdir(exist_ok=True)
    (d / "m.cc").write_text(src.replace(good, "twg_desc(tile + 16 * j, 16, 1024)"))
    so = d / "m.so"
    flags = ["-O0" if f == "-O1" else f for f in GXX_FLAGS]  # builds faster; one site runs quickly anyway
    proc = subprocess.run([GXX, *flags, str(d / "m.cc"), "-o", str(so)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import ctypes
    lib = ctypes.CDLL(str(so))
    lib.twg_emu_config(90, 0, 1)
    ops = operands(case)
    assert call(lib, case, ops) == 0
    assert errors(ops["out"][1], oracle(case, ops)[0])[1] > 0.1


# ---- the 3xTF32 split arithmetic, in Python ------------------------------------------------------

def _tf32(x: torch.Tensor, mode: str) -> torch.Tensor:
    """fp32 to TF32 (10 mantissa bits): "rna" nearest, ties away (cvt.rna.tf32.f32); "trunc" drops the bits."""
    b = x.view(torch.int32)
    b = (b + 0x1000) & ~0x1FFF if mode == "rna" else b & ~0x1FFF
    return b.view(torch.float32)


def _rz(x64: torch.Tensor) -> torch.Tensor:
    """fp64 to fp32 rounded toward zero."""
    f = x64.float()
    return torch.where(f.double().abs() > x64.abs(), torch.nextafter(f, torch.zeros_like(f)), f)


def _fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Plain fp32 summation (an FMA per k, as a CUDA-core GEMM)."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc = (acc.double() + a[:, k:k + 1].double() * b[k:k + 1].double()).float()
    return acc


def _split_rn(a, b, products):
    """The issue's arithmetic: per k the split's products (exact: TF32 x TF32 fits fp32) summed in fp32,
    small ones first, into an fp32 accumulator; round to nearest."""
    acc = torch.zeros(a[0].shape[0], b[0].shape[1])
    for k in range(a[0].shape[1]):
        part = torch.zeros_like(acc)
        for i, j in products:
            part = part + a[i][:, k:k + 1] * b[j][k:k + 1]
        acc = acc + part
    return acc


def _split_kernel(a, b, products, fold: bool):
    """The kernels' arithmetic with a pessimistic tensor core (exact sums of 8 products rounded toward
    zero into its fp32 accumulator): per 32-k tile, every lo*hi, then hi*lo, then hi*hi k-step;
    fold: a fresh accumulator per tile, added into the fp32 sum (round to nearest)."""
    total, acc = torch.zeros(a[0].shape[0], b[0].shape[1]), torch.zeros(a[0].shape[0], b[0].shape[1])
    for k0 in range(0, a[0].shape[1], 32):
        for i, j in products:
            for k in range(k0, min(k0 + 32, a[0].shape[1]), 8):
                acc = _rz(acc.double() + a[i][:, k:k + 8].double() @ b[j][k:k + 8].double())
        if fold:
            total, acc = total + acc, torch.zeros_like(acc)
    return total + acc


@pytest.mark.parametrize("dist", ["rand", "randn"])
def test_3xtf32_split_is_within_twice_fp32_error(dist):
    """Against fp64, for K up to 16384: 3xTF32 (A: hi = rna(x), B: hi = the tensor core's own
    truncation; lo = rna(x - hi)) errs at most 2x plain fp32 summation, both summed in fp32 and as the
    kernels sum (k-tiles folded); 1xTF32 does not meet that bound; without the fold, under a tensor core
    that rounds toward zero, 3xTF32 does not either (docs/gemm.md, "Numerics")."""
    gen = torch.Generator().manual_seed(13)
    draw = torch.rand if dist == "rand" else torch.randn
    three = ((1, 0), (0, 1), (0, 0))  # lo*hi, hi*lo, hi*hi (index 0 = hi, 1 = lo)
    for k in (16, 512, 16384):
        n = 16 if k > 4096 else 32
        a, b = draw(n, k, generator=gen), draw(k, n, generator=gen)
        ref = a.double() @ b.double()
        err = lambda x: float((x.double() - ref).norm() / ref.norm())  # noqa: E731
        ah = _tf32(a, "rna")
        al = _tf32(a - ah, "rna")
        bh = _tf32(b, "trunc")
        bl = _tf32(b - bh, "rna")
        fp32 = err(_fp32(a, b))
        assert err(_split_rn((ah, al), (bh, bl), three)) <= 2 * fp32, k
        assert err(_split_kernel((ah, al), (bh, bl), three, fold=True)) <= 2 * fp32, k
        assert err(_split_rn((_tf32(a, "rna"),), (_tf32(b, "rna"),), ((0, 0),))) > 2 * fp32, k
        if k >= 512:
            assert err(_split_kernel((ah, al), (bh, bl), three, fold=False)) > 2 * fp32, k


# ---- the generator's interface -------------------------------------------------------------------

def test_launcher_signature_and_site_description():
    spec = G("k7", 256, 512, 128, alpha=2.0, beta=1.0, c_strides=(0, 0, 1), inputs=(col("bias"),),
             epilogue="fmaxf(acc + bias[col], 0.f)", reduce="sum")
    site = gemm_site(spec)
    assert site.args == ("a", "b", "c", "bias", "out", "red")
    assert ('extern "C" int tw_launch_k7(const void* a, const void* b, const void* c, const void* bias, void* out, '
            'void* red, int vec, void* stream)') in site.source
    assert 'extern "C" int tw_gemm_path_k7(void)' in site.source
    assert "return (fmaxf(acc + bias[col], 0.f));" in site.source
    assert site.plan.describe().startswith("3xtf32 sm_90a wgmma ")
    assert plan(G("h", 64, 64, 64, dtype="float16")).describe().startswith("native ")


def test_tensor_map_arrays_match_their_rank():
    """Each tensor map gets one dim, box extent and stride per dimension (stride: one less), so the
    encoder never reads past an array (a batched map is rank 3)."""
    maps = 0
    for case in CASES:
        src = gemm_site(case.spec).source
        for m in re.finditer(r"cuuint64_t d(\w)\[\] = \{([^}]*)\}, s\w\[\] = \{([^}]*)\};\s*const cuuint32_t x\w\[\] = "
                             r"\{([^}]*)\};\s*ok = ok && twg_encode\(&cache\.m\w, \w+, (\d)", src):
            rank = int(m[5])
            assert (len(m[2].split(",")), len(m[3].split(",")) + 1, len(m[4].split(","))) == (rank,) * 3, (case.id, m[0])
            maps += 1
    assert maps >= 2 * sum(1 for c in CASES if plan(c.spec).sm90)


def test_unsupported_specs_say_why():
    assert unsupported(G("x", 4, 4, 4, dtype="float64")) == "dtype float64"
    assert "precision" in unsupported(G("x", 4, 4, 4, precision="native"))
    assert unsupported(G("x", 4, 0, 4)) == "an empty dimension"
    assert unsupported(G("x", 4, 4, 4, inputs=(col("acc"),))) == "epilogue input acc"
    with pytest.raises(ValueError, match="unsupported"):
        plan(G("x", 4, 4, 4, reduce="prod"))


def test_tf32_sites_transpose_where_it_saves_the_converter():
    """An N-major fp32 B with a K-major A: the kernel computes (B^T A^T)^T, its B (= A) K-major."""
    p = plan(G("a", 4096, 2048, 1024))
    assert p.swap and (p.m, p.n) == (2048, 4096) and p.b_kmaj and not p.a_kmaj
    assert "int batch, int col, int row, float acc" in gemm_site(G("a", 4096, 2048, 1024)).source
    assert not plan(G("a", 4096, 2048, 1024, b_strides=(0, 1, 1024))).swap  # linear: B already K-major
    assert not plan(G("a", 4096, 2048, 1024, dtype="float16")).swap  # fp16 wgmma reads either major
    assert not plan(G("a", 4096, 2048, 1024, reduce="sum")).swap  # rows stay rows
    assert not plan(G("a", 37, 45, 29)).swap  # no wgmma kernel: nothing to save


def test_tiles_follow_the_shape():
    """Large squares take 128-row tiles; 3xTF32 stays at BN 128 (its second accumulator set); skinny
    shapes take smaller tiles; strides TMA cannot read leave only the mma.sync loop."""
    assert plan(G("a", 8192, 8192, 8192)).sm90[:2] == (128, 128)
    assert plan(G("a", 8192, 8192, 8192, dtype="bfloat16")).sm90[:2] == (128, 256)
    assert plan(G("a", 64, 4096, 4096, dtype="float16")).sm90[0] == 64
    assert plan(G("a", 37, 45, 29)).sm90 is None
    assert plan(G("a", 16384, 1, 16384)).sm90[:2] == (128, 8)  # matrix-vector: an 8-wide tile
    assert plan(G("a", 1, 16384, 16384)).swap and plan(G("a", 1, 16384, 16384)).sm90[1] == 8
    assert plan(G("a", 4096, 4096, 4096, a_strides=(0, 2, 8192 * 2))).sm90 is None  # no unit stride


def test_bench_cli_help_and_dry_run(builds):
    """bench/gemm.py --help, and --dry-run (started by `builds`): generates and nvcc-compiles a site
    for sm_90a and sm_80, times nothing."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gemm.py"), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--dry-run" in proc.stdout
    log = _nvcc(builds, "bench")
    assert "compiled 1 sites" in log and (builds[0] / "bench" / "irr_odd_3x.so").exists(), log[-2000:]
