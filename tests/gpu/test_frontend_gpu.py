"""On a GPU: cumprod (every dim), the Huber / smooth-L1 / MSE losses, torch.cat and values built in
forward from constants (`_tw_held`), each compiled to kernels and compared with eager on CUDA."""
from __future__ import annotations

import pytest
import torch

from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SOURCE = '''"""GPU test model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(7 * 7, 2))

    def forward(self, x, t):
        return ({exprs},)


def get_inputs():
    return [torch.randn({shape}), torch.randn({shape})]


def get_init_inputs():
    return []
'''
EXPRS = {
    "cumprod_last": "torch.cumprod(1.0 + 0.01 * x, dim=-1)",
    "cumprod_first": "torch.cumprod(1.0 + 0.01 * x, dim=0) * 2.0",
    "huber": "F.huber_loss(x, t, delta=0.5)", "huber_sum": "F.huber_loss(x, t, reduction='sum')",
    "smooth_l1": "F.smooth_l1_loss(x, t, beta=0.25)", "smooth_l1_none": "F.smooth_l1_loss(x, t, reduction='none')",
    "mse": "F.mse_loss(x, t)",
    "cat": "torch.relu(torch.cat([x, t * 2.0], dim=-1) - 0.5)",
    "mask": "torch.softmax(x[:16, :16].masked_fill(torch.ones(16, 16, device=x.device).triu(1).bool(), "
            "float('-inf')), dim=-1)",
    "scalar": "torch.min(x, torch.tensor(0.25)) * torch.tensor(3)",
}


@pytest.mark.parametrize("shape", ["64, 1000", "300, 37"])
def test_frontend_ops_match_eager(tmp_path, shape):
    path = tmp_path / "frontend.py"
    path.write_text(SOURCE.format(exprs=", ".join(EXPRS.values()), shape=shape))
    result = compile_problem(load_problem(path))
    nodes = result.plan.graph.by_name()
    assert not [n.target for n in nodes.values() if n.op == "aten" and n.name not in result.plan.held
                and "view" not in n.target and "slice" not in n.target]
    out = tmp_path / "frontend_new.py"
    out.write_text(result.source)
    model = load_module(out, out.read_text(), prefix="tw_frontend_gpu").ModelNew().cuda()
    torch.manual_seed(0)
    x, t = (torch.randn(*map(int, shape.split(", "))).cuda() for _ in range(2))
    with torch.no_grad():
        got, want = model(x, t), model._tw_general(x, t)
    torch.cuda.synchronize()
    bad = [name for name, g, w in zip(EXPRS, got, want)
           if not torch.allclose(g, w, atol=1e-4, rtol=1e-4, equal_nan=True)]
    assert not bad, bad
