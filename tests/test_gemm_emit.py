"""Our GEMM in the emitted file (`--gemm`): the CUDA source of corpus matmul problems compiles with nvcc
for sm_90a and sm_80, the file says the GEMM is unverified, builds with sm_90a's flag only where it
has our GEMM, and `_tw_gemm` keeps ours only where it matched the library's and was faster."""
from __future__ import annotations

import ast
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from torchweld.emit.gemm_wrapper import gemm_build
from torchweld.emit.runtime import pasted
from torchweld.options import Options
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem
from torchweld.runtime.gemm_select import _tw_gemm, _tw_gemm_decide, _tw_gemm_mismatch

MATMUL = Path(__file__).resolve().parents[1] / "problems" / "matmul"
NVCC = shutil.which("nvcc")
PROBLEMS = ["linear_relu", "bmm_transposed_relu_scale", "addmm_alpha_beta_gelu", "linear3d_swish_residual",
            "baddbmm_bias_sigmoid", "linear_gated_residual"]


def _source(name: str, **options) -> str:
    return compile_problem(load_problem(MATMUL / f"{name}.py"), Options(gemm=True, **options)).source


def _globals(src: str) -> dict:
    """The emitted file's `_CUDA_SRC` and `_KERNEL_ARGS`."""
    tree = ast.parse(src)
    return {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name) and t.id in ("_CUDA_SRC", "_KERNEL_ARGS")}


@pytest.mark.parametrize("name", PROBLEMS)
def test_emitted_file_runs_our_gemm_at_each_site(name):
    src = _source(name)
    ast.parse(src)
    assert "our GEMM (unverified on a GPU)" in src and "_tw_gemm(self, " in src
    assert "*_tw_gemm_flags()" in src and "def _tw_time(" in src and "_tw_lt(" not in src
    g = _globals(src)
    assert any(k.startswith("g") for k in g["_KERNEL_ARGS"]) and "twg_site_g" in g["_CUDA_SRC"]


def test_without_our_gemm_the_build_is_as_before():
    src = compile_problem(load_problem(MATMUL / "linear_relu.py")).source
    assert "_tw_gemm" not in src and pasted("extension") in src
    assert gemm_build(pasted("extension")).count("_tw_gemm_flags()") == 2


@pytest.fixture(scope="module")
def cuda_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("gemm_emit")
    files = []
    for name in PROBLEMS[:4] + ["linear_relu_tf32"]:
        src = _source(name.removesuffix("_tf32"), **({"precision": "tf32"} if name.endswith("_tf32") else {}))
        path = out / f"{name}.cu"
        path.write_text(_globals(src)["_CUDA_SRC"])
        files.append(path)
    return files


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["compute_90a,code=sm_90a", "compute_80,code=sm_80"])
def test_emitted_cuda_compiles(cuda_files, arch):
    procs = [subprocess.Popen([NVCC, f"-gencode=arch={arch}", "-std=c++17", "-O3", "-lineinfo", "-c", str(f), "-o",
                               str(f.with_suffix(f".{arch[-4:]}.o"))], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for f in cuda_files]
    logs = {f.name: (p.communicate()[0], p.returncode) for f, p in zip(cuda_files, procs)}
    assert all(rc == 0 for _, rc in logs.values()), {n: log[-2000:] for n, (log, rc) in logs.items() if rc}
    assert not any("warning" in log for log, _ in logs.values()), logs


class _Module:
    pass


def _fake(value, log, name):
    def call(*args):
        log.append(name)
        return value
    return call


def test_tw_gemm_keeps_ours_where_it_matches_and_is_faster():
    x = torch.randn(8, 8)
    log = []
    ours, lib = _fake((x + 1e-7,), log, "ours"), _fake((x,), log, "library")
    assert _tw_gemm_decide("gk0", ours, lib, (x,), lambda calls: [1.0, 2.0])[0] == "ours"
    assert _tw_gemm_decide("gk0", ours, lib, (x,), lambda calls: [2.0, 1.0])[0] == "library"


def test_tw_gemm_mismatch_keeps_the_library_and_warns():
    x = torch.randn(8, 8)
    ours, lib = _fake((x + 1.0,), [], "ours"), _fake((x,), [], "library")
    with pytest.warns(RuntimeWarning, match="site gk0 does not match.*64 of 64 elements off"):
        way, why = _tw_gemm_decide("gk0", ours, lib, (x,), lambda calls: pytest.fail("a mismatch is not timed"))
    assert way == "library"


def test_tw_gemm_without_a_gemm_path_keeps_the_library():
    x = torch.randn(4, 4)
    assert _tw_gemm_decide("gk0", lambda *a: None, _fake((x,), [], "l"), (x,), None)[0] == "library"


def test_tw_gemm_decides_once_and_off_cuda_runs_the_library():
    x = torch.randn(4, 4)
    log, m = [], _Module()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            _tw_gemm(m, "gk0", _fake((x,), log, "ours"), _fake((x,), log, "library"), x)
    assert log == ["library"] * 3 and m._tw_gemm_picks[("gk0", -1)][0] == "library"


def test_mismatch_tolerance_follows_the_dtype():
    a = torch.ones(4, dtype=torch.float16)
    assert _tw_gemm_mismatch((a * 1.005,), (a,)) == ""
    assert _tw_gemm_mismatch((a * 1.05,), (a,)) != ""
    nan = torch.tensor([float("nan"), 1.0])
    assert _tw_gemm_mismatch((nan,), (nan.clone(),)) == "" and _tw_gemm_mismatch((nan.nan_to_num(),), (nan,)) != ""


def test_mismatch_tolerance_under_tf32_is_the_judges():
    a = torch.ones(4)
    was = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert _tw_gemm_mismatch((a * 1.0005,), (a,)) != ""
        torch.backends.cuda.matmul.allow_tf32 = True
        assert _tw_gemm_mismatch((a * 1.0005,), (a,)) == "" and _tw_gemm_mismatch((a * 1.005,), (a,)) != ""
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was
