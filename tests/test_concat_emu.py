"""torch.cat as a kernel of its own with its epilogue, run on the CPU emulator against eager: every dim,
three parts, a part read through its strides (a transpose), a concatenation of a concatenation, and
torch.stack (a cat of its parts reshaped)."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, launching, mismatch, write_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

SOURCE = '''"""Emulator test model."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        a = torch.cat([x, y * 2.0], dim=1)
        return (torch.relu(a - 0.5), torch.cat([a, x], dim=1) + 1.0, torch.cat([x, y, x], dim=0),
                torch.cat([x, y.transpose(2, 3)], dim=-1).sigmoid(), torch.cat([x[:, :2], y], dim=1),
                torch.stack([x.exp(), y.transpose(2, 3)], dim=2) * 3.0)


def get_inputs():
    return [torch.randn(3, 5, 7, 7), torch.randn(3, 5, 7, 7)]


def get_init_inputs():
    return []
'''


def test_cat_runs_in_its_own_kernel(tmp_path):
    path = write_problem(tmp_path, "concat", SOURCE)
    new_cls, result = emulated_model(path, tmp_path)
    plan = result.plan
    nodes = plan.graph.by_name()
    cats = [k for k in plan.kernels if k.anchor and nodes[k.anchor].op == "cat"]
    assert len(cats) == 6  # NOTE: each used to be a torch.cat call, and its epilogue a kernel after it
    assert not [n for n in plan.graph.nodes if n.op == "aten" and ("cat" in n.target or "stack" in n.target)]
    assert any(len(k.nodes) > 1 for k in cats)
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    x, y = torch.randn(3, 5, 7, 7), torch.randn(3, 5, 7, 7)
    y[0, 0, 0, 0] = float("nan")
    with torch.no_grad():
        want, got = namespace["Model"]()(x, y), new_cls()(x, y)
    launched = new_cls.forward.__globals__["_LIB"].launched
    assert set(launched) == launching(result.plan)  # NOTE: not the general path
    bad = [f"{i}: {m}" for i, (g, w) in enumerate(zip(got, want)) if (m := mismatch(g, w, 1e-6))]
    assert not bad, "\n".join(bad)
