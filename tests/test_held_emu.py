"""Values forward builds from constants and parameters alone (a causal mask, a relative-position bias
gathered through an index built from arange): made once by `_tw_held`, read by the kernels; run on
the CPU emulator against eager, and made again when the parameter changes."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, launching, mismatch, reference_and_new, write_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

SOURCE = '''"""Emulator test model."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(7 * 7, 2))

    def forward(self, x):
        t = x.shape[-1]
        mask = torch.ones(t, t, device=x.device).triu(1).bool()
        c = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")).flatten(1)
        rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + 3
        bias = self.table[(rel[..., 0] * 7 + rel[..., 1]).view(-1)].view(16, 16, 2).permute(2, 0, 1)
        scale = torch.tensor([0.5, 2.0]).view(2, 1, 1)
        return torch.softmax(x.masked_fill(mask, float("-inf")), dim=-1), torch.softmax(x * scale + bias, dim=-1)


def get_inputs():
    return [torch.randn(3, 2, 16, 16)]


def get_init_inputs():
    return []
'''


def test_held_values_are_made_once_and_follow_the_parameter(tmp_path):
    path = write_problem(tmp_path, "held", SOURCE)
    new_cls, result = emulated_model(path, tmp_path)
    plan = result.plan
    nodes = plan.graph.by_name()
    held = {nodes[h].target for h in plan.held}
    assert {"aten.ones.default", "aten.triu.default", "aten.arange.default", "aten.index.Tensor"} <= held
    outside = [s for s in plan.steps if s in nodes and s not in plan.held and nodes[s].op == "aten"
               and "view" not in nodes[s].target]
    assert outside == [], outside  # NOTE: the mask and bias used to be made by PyTorch on every call
    assert "def _tw_held(self, _dev, p0):" in result.source
    ref, new = reference_and_new(path, new_cls)
    x = torch.randn(3, 2, 16, 16)
    with torch.no_grad():
        for _ in range(2):
            bad = [m for g, w in zip(new(x), ref(x)) if (m := mismatch(g, w, 1e-5))]
            assert not bad, bad
        made = new.__dict__["_tw_held_values"]
        assert set(new_cls.forward.__globals__["_LIB"].launched) == launching(plan)
        new(x)
        assert new.__dict__["_tw_held_values"] is made  # NOTE: made once
        ref.table.mul_(3.0)
        new.table.mul_(3.0)  # NOTE: an in-place update makes them again
        bad = [m for g, w in zip(new(x), ref(x)) if (m := mismatch(g, w, 1e-5))]
        assert not bad and new.__dict__["_tw_held_values"] is not made, bad


def test_weights_summed_once_run_without_a_device_argument(tmp_path):
    """reduce_rewrites sums a linear's weight (x @ sum(W)); the sum is held: forward must define the
    device `_tw_held` is keyed on even where no call takes a device (it raised NameError)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "problems" / "reduce" / "linear_sum_features.py"
    new_cls, result = emulated_model(path, tmp_path)
    assert result.plan.held
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    ref = namespace["Model"](*namespace["get_init_inputs"]())
    new = new_cls(*namespace["get_init_inputs"]())
    new.load_state_dict(ref.state_dict())
    x = namespace["get_inputs"]()
    with torch.no_grad():
        for _ in range(2):
            assert not (m := mismatch(new(*x), ref(*x), 1e-4)), m
