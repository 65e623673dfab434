"""On a GPU: every corpus problem whose header says its sequence length is a runtime size matches eager at
lengths 1, about half the captured one (odd) and twice it, at the captured batch and at batch 1, from one
emission, its kernels running at each (the original forward is never called)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.usefixtures("strict_fp32")]

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = sorted(p for p in (ROOT / "problems").rglob("*.py"))


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_sequence_lengths_from_one_emission(problem, tmp_path):
    prob = load_problem(problem)
    result = compile_problem(prob)
    if not result.plan.guard.seq:
        pytest.skip("the sequence length is specialised")
    path = tmp_path / "new.py"
    path.write_text(result.source)
    module = load_module(path, path.read_text(), prefix="tw_gpu_seq")
    ref = prob.build_model(0).cuda()
    new = module.ModelNew(*prob.init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    inputs = prob.inputs()
    b, s = result.plan.guard.batch[0], result.plan.guard.seq
    for batch, seq in ((b, 1), (b, s // 2 | 1), (b, 2 * s), (1, 2 * s + 1)):
        # NOTE: the problem's own inputs, repeated along the sequence: the same value ranges
        xs = [torch.cat([x] * -(-seq // s), 1)[:batch, :seq].cuda() if isinstance(x, torch.Tensor) else x
              for x in inputs]
        with torch.no_grad():
            want = ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs])
            got = new(*xs)
        for g, w in zip(*[o if isinstance(o, (tuple, list)) else (o,) for o in (got, want)]):
            tol = 1e-2 if w.dtype in (torch.float16, torch.bfloat16) else 1e-4
            assert g.shape == w.shape, (batch, seq)
            assert torch.allclose(g.double(), w.double(), atol=tol, rtol=tol), (
                (batch, seq), (g.double() - w.double()).abs().max().item())
