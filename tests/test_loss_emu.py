"""The pointwise losses (Huber, smooth L1, MSE) as one reduce kernel over their pointwise chain, run
on the CPU emulator against eager: every reduction, beta and delta, with NaN and inf."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, launching, mismatch, write_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

SOURCE = '''"""Emulator test model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.huber = nn.HuberLoss(reduction="sum", delta=0.3)
        self.smooth = nn.SmoothL1Loss(beta=2.0)

    def forward(self, p, t):
        return ({exprs},)


def get_inputs():
    return [torch.randn({shape}), torch.randn({shape})]


def get_init_inputs():
    return []
'''
LOSSES = {
    "huber": "F.huber_loss(p, t)", "huber_sum_delta": "F.huber_loss(p, t, reduction='sum', delta=2.5)",
    "huber_none": "F.huber_loss(p, t, reduction='none', delta=0.5) * 2.0",
    "smooth": "F.smooth_l1_loss(p, t)", "smooth_beta": "F.smooth_l1_loss(p, t, beta=0.25)",
    "smooth_beta0": "F.smooth_l1_loss(p, t, beta=0.0)", "smooth_none": "F.smooth_l1_loss(p, t, reduction='none')",
    "module_huber": "self.huber(p, t)", "module_smooth": "self.smooth(p * 2.0, t)", "mse": "F.mse_loss(p, t)",
}


@pytest.mark.parametrize("shape,special", [((16, 33), True), ((64, 4096), False)])
def test_losses_fuse_and_match(tmp_path, shape, special):
    path = write_problem(tmp_path, f"loss{shape[1]}",
                         SOURCE.format(exprs=", ".join(LOSSES.values()), shape=", ".join(map(str, shape))))
    new_cls, result = emulated_model(path, tmp_path)
    plan = result.plan
    assert not [n.target for n in plan.graph.nodes if n.op == "aten"]  # NOTE: huber_loss used to stay whole
    assert sum(k.kind == "reduce" for k in plan.kernels) == len(LOSSES) - 2  # NOTE: reduction="none" is pointwise
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    p, t = torch.randn(shape) * 2, torch.randn(shape)
    if special:
        p[1, 2], p[3, 4], t[5, 6], t[7, 7] = float("nan"), float("inf"), float("-inf"), 1e30
    ref, new = namespace["Model"](), new_cls()
    with torch.no_grad():
        want, got = ref(p.clone(), t.clone()), new(p.clone(), t.clone())
    launched = new_cls.forward.__globals__["_LIB"].launched
    assert set(launched) == launching(result.plan)  # NOTE: not the general path
    rows = [(name, g, w) for name, g, w in zip(LOSSES, got, want)]
    if special:  # NOTE: the rows with NaN/inf: compare the elementwise losses, the reductions are NaN/inf alike
        assert all(g.isfinite().all() == w.isfinite().all() for _, g, w in rows)
    bad = [f"{name}: {m}" for name, g, w in rows if (m := mismatch(g, w, 1e-4))]
    assert not bad, "\n".join(bad)
