"""On a GPU: our GEMM kernel kind (torchweld/codegen/gemm*.py) for every shape class of issue 13
against an fp64 oracle on fresh random inputs, each output poisoned with NaN before the run, built
the way an emitted file is (load_inline, extra_cuda_cflags below). On an sm_90 device every site
TMA can read must run the wgmma main loop; 3xTF32 must err at most 2x cuBLAS strict fp32."""
from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import inspect
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gemm_harness import NVCC_SM90, TOLERANCE, Case, call, col, errors, operands, oracle  # noqa: E402
from torchweld.codegen.gemm import EpilogueInput as X  # noqa: E402
from torchweld.codegen.gemm import GemmSpec as G  # noqa: E402
from torchweld.codegen.gemm import plan  # noqa: E402
from torchweld.codegen.gemm_source import gemm_source  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def T(m: int, k: int) -> tuple:
    return (m * k, 1, m)


relu = dict(epilogue="fmaxf(acc + bias[col], 0.f)", inputs=(col("bias"),))
CASES = [
    # square
    Case("sq_3x", G("sq_3x", 2048, 2048, 2048)),
    Case("sq_1x", G("sq_1x", 2048, 2048, 2048, precision="1xtf32")),
    Case("sq_f16", G("sq_f16", 2048, 2048, 2048, dtype="float16")),
    Case("sq_bf16", G("sq_bf16", 2048, 2048, 2048, dtype="bfloat16")),
    # tall-skinny, wide, small-K, large-K
    Case("tall", G("tall", 16384, 64, 1024)),
    Case("wide", G("wide", 64, 16384, 1024)),
    Case("smallk", G("smallk", 2048, 2048, 16)),
    Case("largek", G("largek", 256, 256, 16384)),
    Case("largek_nofold", G("largek_nofold", 256, 256, 16384, fold=False)),
    # irregular: TMA-readable edges, then strides TMA cannot read (mma.sync on every device)
    Case("irr", G("irr", 1000, 1000, 1000)),
    Case("irr_odd", G("irr_odd", 999, 1001, 997)),
    Case("irr_f16", G("irr_f16", 1000, 1032, 1000, dtype="float16")),
    Case("tiny", G("tiny", 3, 5, 7)),
    # batched, broadcast, transposed (read in place)
    Case("bmm", G("bmm", 512, 512, 512, batch=8)),
    Case("bmm_bcast_a", G("bmm_bcast_a", 512, 384, 256, batch=4, a_strides=(0, 256, 1))),
    Case("bmm_qk", G("bmm_qk", 1024, 1024, 64, batch=16, dtype="bfloat16", b_strides=(1024 * 64, 1, 64))),
    Case("at", G("at", 1024, 768, 512, a_strides=T(1024, 512))),
    Case("bt_linear", G("bt_linear", 4096, 1024, 512, b_strides=(0, 1, 512))),
    # B's TF32 hi part rounded and written by the converter, not the tensor core's own truncation of B:
    # if `bt_linear` errs like 1xTF32 and this one passes, the tensor core rounds (docs/gemm.md)
    Case("bt_linear_rna", G("bt_linear_rna", 4096, 1024, 512, b_strides=(0, 1, 512), tf32_hi="rna")),
    Case("atbt_1x", G("atbt_1x", 1024, 1024, 1024, precision="1xtf32", a_strides=T(1024, 1024), b_strides=(0, 1, 1024))),
    Case("at_f16", G("at_f16", 1024, 1024, 1024, dtype="float16", a_strides=T(1024, 1024))),
    Case("bt_bf16", G("bt_bf16", 1024, 1024, 1024, dtype="bfloat16", b_strides=(0, 1, 1024))),
    # matrix-vector
    Case("matvec", G("matvec", 4096, 1, 4096)),
    Case("vecmat", G("vecmat", 1, 4096, 4096)),
    # epilogues, alpha/beta, reductions
    Case("bias_relu", G("bias_relu", 1536, 1280, 1024, **relu), epi=lambda a, r, c, b, x: torch.clamp_min(a + x["bias"], 0)),
    Case("addmm", G("addmm", 1024, 1024, 512, alpha=0.5, beta=2.0, c_strides=(0, 0, 1),
                    epilogue="acc * scale[row] + res(row, col)",
                    inputs=(X("scale", "row", (0, 1, 0)), X("res", "full", (0, 1024, 1)))),
         epi=lambda a, r, c, b, x: a * x["scale"] + x["res"]),
    Case("rowsum", G("rowsum", 2048, 1536, 512, reduce="sum", store=False)),
    Case("rowmax", G("rowmax", 1000, 3000, 256, reduce="max", **relu),
         epi=lambda a, r, c, b, x: torch.clamp_min(a + x["bias"], 0)),
    Case("rowsum_f16", G("rowsum_f16", 1024, 1000, 512, dtype="float16", reduce="sum", reduce_expr="r / 1000.f"),
         post=lambda r: r / 1000),
    Case("out_strided", G("out_strided", 512, 512, 256, out_strides=(0, 1024, 2))),
]
IDS = [c.id for c in CASES]


def cflags() -> list[str]:
    """What an emitted file's build must add: sm_90a on an sm_90 device (wgmma, setmaxnreg). NOTE: an
    `arch` flag here replaces load_inline's own arch flags, so it is given on sm_90 devices only."""
    return ["-O3", "-lineinfo"] + (NVCC_SM90 if torch.cuda.get_device_capability() == (9, 0) else [])


@pytest.fixture(scope="session")
def libs():
    """The sites in 4 extensions built in parallel, opened with ctypes: {case id: library}."""
    from torch.utils import cpp_extension

    def build(chunk):
        src = gemm_source([c.spec for c in chunk])
        flags = cflags()
        name = "tw_gemm_test_" + hashlib.sha256((src + repr(flags)).encode()).hexdigest()[:16]
        kw = dict(name=name, cpp_sources="", cuda_sources=src, is_python_module=False, extra_cuda_cflags=flags)
        if "no_implicit_headers" in inspect.signature(cpp_extension.load_inline).parameters:
            kw["no_implicit_headers"] = True
        return chunk, ctypes.CDLL(cpp_extension.load_inline(**kw))

    chunks = [CASES[i::4] for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return {c.id: lib for chunk, lib in pool.map(build, chunks) for c in chunk}


def _stream() -> int:
    return torch.cuda.current_stream().cuda_stream


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gemm_matches_fp64(libs, case):
    lib = libs[case.id]
    p = plan(case.spec)
    path = getattr(lib, f"tw_gemm_path_{case.spec.name}")()
    if torch.cuda.get_device_capability() == (9, 0) and p.sm90:
        assert path == 90, "an sm_90 device must run the wgmma main loop (built with sm_90a?)"
    else:
        assert path == 80
    for seed, fill in ((1, "rand"), (2, "randn")):  # fresh inputs each run
        ops = operands(case, seed=seed, device="cuda", fill=fill)
        assert call(lib, case, ops, vec=1, stream=_stream()) == 0
        torch.cuda.synchronize()
        out, red = oracle(case, ops)
        tol = TOLERANCE[p.spec.precision]
        if case.spec.store:
            got, view = ops["out"]
            max_err, rel, unwritten = errors(view, out)
            assert unwritten == 0 and rel < tol, (fill, max_err, rel, unwritten)
            outside = torch.ones_like(got, dtype=torch.bool)
            outside.as_strided(view.shape, view.stride()).fill_(False)
            assert got[outside].isnan().all(), "written outside the output view"
        if case.spec.reduce:
            max_err, rel, unwritten = errors(ops["red"][1], red)
            assert unwritten == 0 and rel < tol, (fill, max_err, rel, unwritten)


@pytest.mark.parametrize("case", [c for c in CASES if c.id in ("sq_3x", "irr", "at_f16", "rowsum", "bmm")], ids=lambda c: c.id)
def test_unaligned_pointers_run_the_element_loader(libs, case):
    """vec=0 (the caller saw a pointer not 16-byte aligned): the mma.sync kernel with element loads."""
    ops = operands(case, seed=3, device="cuda")
    assert call(libs[case.id], case, ops, vec=0, stream=_stream()) == 0
    out, red = oracle(case, ops)
    got, ref = (ops["out"][1], out) if case.spec.store else (ops["red"][1], red)
    assert errors(got, ref)[1] < TOLERANCE[plan(case.spec).spec.precision]


@pytest.mark.parametrize("cid", ["largek", "sq_3x", "bt_linear", "bt_linear_rna", "at"])
@pytest.mark.parametrize("fill", ["rand", "randn"])
def test_3xtf32_error_at_most_twice_cublas_fp32(libs, cid, fill):
    """Issue 13's bound: 3xTF32's relative error against fp64 <= 2x cuBLAS strict fp32's, same inputs."""
    case = next(c for c in CASES if c.id == cid)
    ops = operands(case, seed=11, device="cuda", fill=fill)
    assert call(libs[cid], case, ops, vec=1, stream=_stream()) == 0
    ref, _ = oracle(case, ops)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        cublas = torch.matmul(ops["a"][1], ops["b"][1])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    ours, theirs = errors(ops["out"][1], ref)[1], errors(cublas, ref)[1]
    print(f"{cid} {fill}: 3xTF32 {ours:.3e}, cuBLAS fp32 {theirs:.3e}")
    assert ours <= 2 * theirs


def test_kernels_do_not_touch_other_streams_or_inputs(libs):
    """The launch runs on the given stream and leaves A, B and the epilogue inputs as they were."""
    case = next(c for c in CASES if c.id == "addmm")
    ops = operands(case, seed=5, device="cuda")
    before = {k: v[0].clone() for k, v in ops.items() if k not in ("out", "red")}
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert call(libs[case.id], case, ops, vec=1, stream=s.cuda_stream) == 0
    s.synchronize()
    assert all(torch.equal(before[k], ops[k][0]) for k in before)
    assert errors(ops["out"][1], oracle(case, ops)[0])[1] < TOLERANCE["3xtf32"]
