"""On a GPU: a few training steps through Model and ModelNew side by side, on a sample of every
family of the corpus, give the same losses, gradients and running statistics; after them, the fast
path (no grad) matches eager with the trained weights (folded and packed copies made again)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.usefixtures("strict_fp32")]

ROOT = Path(__file__).resolve().parents[2]
PER_FAMILY = 3
SAMPLE = [p for family in sorted(d for d in (ROOT / "problems").iterdir() if d.is_dir())
          for p in sorted(family.glob("*.py"))[:PER_FAMILY]]
STEPS = 3


def _tol(t: torch.Tensor) -> float:
    return 1e-2 if t.dtype in (torch.float16, torch.bfloat16) else 1e-4


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a.double(), b.double(), atol=_tol(a), rtol=_tol(a))


def _loss(out) -> torch.Tensor | None:
    """Mean of squares over the floating outputs that carry a gradient (None: none do)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    terms = [o.float().square().mean() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    return sum(terms) if terms else None


@pytest.mark.parametrize("problem", SAMPLE, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_training_steps_match_eager(problem, tmp_path):
    prob = load_problem(problem)
    path = tmp_path / "new.py"
    path.write_text(compile_problem(prob).source)
    module = load_module(path, path.read_text(), prefix="tw_gpu_train")
    ref = prob.build_model(0).cuda()
    new = module.ModelNew(*prob.init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=1e-3) if list(m.parameters()) else None for m in (ref, new)]
    for step in range(STEPS):
        torch.manual_seed(100 + step)
        xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.inputs()]
        grads_in = []
        losses = []
        for m, opt in zip((ref, new), opts):
            ins = [x.clone().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x for x in xs]
            if opt:
                opt.zero_grad()
            loss = _loss(m(*ins))
            if loss is None:
                pytest.skip("no output carries a gradient")
            loss.backward()
            if opt:
                opt.step()
            losses.append(loss.detach())
            grads_in.append([x.grad for x in ins if isinstance(x, torch.Tensor) and x.requires_grad])
        assert _close(losses[1], losses[0]), (step, losses)
        for i, (a, b) in enumerate(zip(*grads_in)):
            assert (a is None) == (b is None) and (a is None or _close(b, a)), (step, f"input {i}")
        for (name, a), b in zip(ref.named_parameters(), new.parameters()):
            assert (a.grad is None) == (b.grad is None), (step, name)
            assert a.grad is None or _close(b.grad, a.grad), (step, name, (b.grad - a.grad).abs().max())
    for (name, a), b in zip(ref.state_dict().items(), new.state_dict().values()):
        assert a.dtype == b.dtype and (_close(b, a) if a.is_floating_point() else torch.equal(a, b)), name
    torch.manual_seed(7)
    xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.inputs()]
    with torch.no_grad():
        want, got = ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs]), new(*xs)
    for i, (g, w) in enumerate(zip(*[o if isinstance(o, (tuple, list)) else (o,) for o in (got, want)])):
        assert (_close(g, w) if w.is_floating_point() else torch.equal(g, w)), f"output {i} after training"
