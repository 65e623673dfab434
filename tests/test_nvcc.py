"""nvcc compiles every generated kernel and launcher for sm_90 (the CUDA source has no PyTorch header): by default
every third problem of each family (each family's kinds still reach nvcc, within CI's time budget), every problem
under --full-sweep."""
from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from helpers import NVCC, nvcc_errors
from torchweld.codegen import module_source
from torchweld.plan.conv_layout import conv_layouts
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = sorted((ROOT / "problems").rglob("*.py"))


def _cuda(problem: Path) -> str:
    """The CUDA source as the emitted file holds it: each kernel, and its `_cl` build where a
    convolution's channels-last output may reach it (conv_layout.py)."""
    result = compile_problem(load_problem(problem))
    return module_source(list(result.plan.kernels), result.plan.graph, conv_layouts(result.plan))


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_kernels_compile_for_sm90":
        full = metafunc.config.getoption("--full-sweep")
        chosen = [p for f in sorted({p.parent for p in PROBLEMS})
                  for p in [q for q in PROBLEMS if q.parent == f][::1 if full else 3]]
        metafunc.parametrize("problem", chosen, ids=[f"{p.parent.name}/{p.stem}" for p in chosen])


@pytest.fixture(scope="module")
def errors(tmp_path_factory, request) -> dict[Path, str]:
    """nvcc's errors by problem: the corpus in two translation units (nvcc's fixed cost, the host
    compile most of all, is paid per unit), the first compiled while the second half is traced."""
    out = tmp_path_factory.mktemp("cu")
    selected = {item.callspec.params["problem"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_kernels_compile_for_sm90"}
    problems = [p for p in PROBLEMS if p in selected]
    half = len(problems) // 2
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = []
        for i, part in enumerate((problems[:half], problems[half:])):  # NOTE: tracing is not thread-safe
            sources = {p: _cuda(p) for p in part}
            jobs.append(pool.submit(nvcc_errors, sources, out / f"corpus{i}.cu"))
        return {p: e for job in jobs for p, e in job.result().items()}


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_kernels_compile_for_sm90(problem, errors):
    assert problem not in errors, errors[problem]


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_errors_are_told_apart(tmp_path):
    """One broken source of three: its error is its own, the others compile."""
    good = "#include <cuda_runtime.h>\n__global__ void k0(float* y) { y[threadIdx.x] = 1.0f; }\n" \
           'extern "C" int tw_launch_k0(void* y) { k0<<<1, 32>>>((float*)y); return (int)cudaGetLastError(); }\n'
    bad = good.replace("1.0f;", "undefined_name;")
    found = nvcc_errors({"a": good, "b": bad, "c": good}, tmp_path / "three.cu")
    assert list(found) == ["b"] and "undefined_name" in found["b"], found


def test_every_op_has_a_cuda_emitter():
    """Each pointwise op the IR knows compiles to CUDA in float and double."""
    from torchweld.codegen.ops import cuda_expr
    from torchweld.ir import POINTWISE, Node, Ref

    attrs = {"leaky_relu": (("slope", 0.1),), "elu": (("alpha", 1.0), ("input_scale", 1.0), ("scale", 1.0)),
             "softplus": (("beta", 1.0), ("threshold", 20.0))}
    for op in sorted(POINTWISE):
        for ctype in ("float", "double"):
            n = Node("v1", op, (Ref("a"), Ref("b"), Ref("c")), (2,), "float32", attrs=attrs.get(op, ()))
            assert cuda_expr(n, ["a", "b", "c"], ctype)
