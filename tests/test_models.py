"""The whole-model problems (problems/models/): each compiles in seconds on the CPU, never to the
original forward, and runs every op outside a GEMM or convolution in a kernel of ours."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from torchweld.ir import LIBRARY, VIEWS
from torchweld.pipeline import compile_problem, compile_source
from torchweld.problem import load_problem
from torchweld.simplify.conv_fold import FOLD

MODELS = sorted((Path(__file__).resolve().parents[1] / "problems" / "models").glob("*.py"))
# Calls that move no data (views of a tensor), and attention, which picks its own CUDA kernels.
NO_WORK = VIEWS | {"aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.expand.default",
                   "aten.unsqueeze.default", "aten.squeeze.dim", "aten.select.int", "aten.slice.Tensor",
                   "aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int",
                   "aten.scaled_dot_product_attention.default"}


def outside_kernels(plan) -> list[str]:
    """The steps forward runs in PyTorch on every call that are neither a library GEMM or convolution
    nor a view: what a kernel of ours should have done."""
    nodes = plan.graph.by_name()
    left = []
    for s in plan.steps:
        n = nodes.get(s)
        if n is None or n.op in ("input", "param", "getitem", FOLD) or s in plan.held or s in plan.elided_views \
                or s in plan.packed_weights or n.op == "aten" and (n.target in LIBRARY or n.target in NO_WORK):
            continue
        left.append(f"{s} = {n.target or n.op}")
    return left


def test_there_are_ten_models():
    assert len(MODELS) >= 10


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_compiles_fast_to_kernels(path):
    problem = load_problem(path)
    start = time.perf_counter()
    _, reason = compile_source(problem)
    took = time.perf_counter() - start
    assert reason is None, reason
    assert took < 30, f"{path.stem}: {took:.1f} s"
    plan = compile_problem(problem).plan
    assert plan.kernels and outside_kernels(plan) == []
