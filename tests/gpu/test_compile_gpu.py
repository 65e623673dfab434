"""On a GPU: every corpus problem compiles to a ModelNew that loads the original's weights and
matches eager PyTorch on 5 fresh inputs (fp32: atol = rtol = 1e-4; fp16/bf16: 1e-2)."""
from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import pytest
import torch

from torchweld.firstcheck import first_check
from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = sorted(p for p in (ROOT / "problems").rglob("*.py"))


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """Compile every problem, then build all extensions in parallel (each build is a subprocess)."""
    out = tmp_path_factory.mktemp("modelnew")
    paths, errors = {}, {}
    for p in PROBLEMS:
        try:
            result = compile_problem(load_problem(p))
            path = out / f"{p.parent.name}__{p.stem}.py"
            path.write_text(result.source)
            paths[p] = path
        except Exception as e:  # reported by the problem's own test
            errors[p] = f"{type(e).__name__}: {e}"

    def build(path):
        start = time.perf_counter()
        load_module(path, path.read_text(), prefix="tw_gpu_test")
        return time.perf_counter() - start

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = {p: pool.submit(build, path) for p, path in paths.items()}
        for p, f in futures.items():
            try:
                f.result()
            except Exception as e:
                errors[p] = f"build: {type(e).__name__}: {e}"
    return paths, errors


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_matches_eager(problem, built):
    paths, errors = built
    assert problem not in errors, errors.get(problem)
    report = first_check(load_problem(problem), paths[problem], trials=5, timing=False)
    assert report.ok, report.text()
