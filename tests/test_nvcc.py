"""nvcc compiles every generated kernel for sm_90 (the CUDA source has no PyTorch header)."""
from __future__ import annotations

import concurrent.futures
import shutil
import subprocess
from pathlib import Path

import pytest

from torchweld.codegen import module_source
from torchweld.plan.conv_layout import conv_layouts
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = sorted((ROOT / "problems").rglob("*.py"))
NVCC = shutil.which("nvcc")


def _cuda(problem: Path) -> str:
    """The CUDA source as the emitted file holds it: each kernel, and its `_cl` build where a
    convolution's channels-last output may reach it (conv_layout.py)."""
    result = compile_problem(load_problem(problem))
    return module_source(list(result.plan.kernels), result.plan.graph, conv_layouts(result.plan))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Compile all corpus kernels, a few nvcc processes at a time."""
    out = tmp_path_factory.mktemp("cu")

    sources = {}
    for problem in PROBLEMS:  # NOTE: tracing is not thread-safe; only nvcc runs in parallel
        sources[problem] = out / f"{problem.parent.name}__{problem.stem}.cu"
        sources[problem].write_text(_cuda(problem))

    # NOTE: the host-side launchers come from one template: a full compile of one problem per
    # category checks them; the others compile their device code only (-cubin: 3x faster).
    full = {next(p for p in PROBLEMS if p.parent == d) for d in {p.parent for p in PROBLEMS}}

    def one(problem: Path):
        cu = sources[problem]
        mode = ["-c", "-o", str(cu.with_suffix(".o"))] if problem in full else ["-cubin", "-o", str(cu.with_suffix(".cubin"))]
        proc = subprocess.run([NVCC, "-arch=sm_90", "-O3", str(cu), *mode], capture_output=True, text=True)
        return proc.returncode, proc.stderr[-2000:]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return dict(zip(PROBLEMS, pool.map(one, PROBLEMS)))


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_kernels_compile_for_sm90(problem, compiled):
    rc, err = compiled[problem]
    assert rc == 0, err


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
