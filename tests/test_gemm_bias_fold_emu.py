"""A GEMM's bias (and addmm/baddbmm's alpha and beta) moved into the kernel after it
(epilogue.fold_library_bias), on the CPU emulator (tests/emulator.py) against eager: the library
call loses its bias copy, the kernel computes beta * bias + alpha * product, as cuBLAS does."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, reference_and_new, write_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

SOURCE = '''"""Emulator test model."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn({w}) * 0.2)
        self.b = nn.Parameter(torch.randn({b}))

    def forward(self, x):
        return torch.sigmoid({expr})


def get_inputs():
    return [torch.randn({x})]


def get_init_inputs():
    return []
'''
CASES = {
    "addmm_alpha_beta": ("torch.addmm(self.b, x, self.w, beta=0.5, alpha=2.0)", "24, 40", "40, 36", "36"),
    "addmm_alpha": ("torch.addmm(self.b, x, self.w, alpha=-1.5)", "24, 40", "40, 36", "36"),
    "addmm_2d_bias": ("torch.addmm(self.b, x, self.w, beta=2.0)", "24, 40", "40, 36", "24, 36"),
    "baddbmm_broadcast_bias": ("torch.baddbmm(self.b, x, self.w)", "3, 20, 40", "3, 40, 36", "1, 20, 36"),
    "baddbmm_scaled": ("torch.baddbmm(self.b, x, self.w, beta=0.25, alpha=3.0)", "3, 20, 40", "3, 40, 36", "20, 36"),
}


@pytest.mark.parametrize("name", CASES)
def test_folded_bias_matches_eager(name, tmp_path):
    expr, x, w, b = CASES[name]
    path = write_problem(tmp_path, name, SOURCE.format(expr=expr, x=x, w=w, b=b))
    new_cls, result = emulated_model(path, tmp_path)
    assert any(line.startswith("fold_library_bias") for line in result.plan.graph.log), result.plan.graph.log
    targets = {n.target for n in result.plan.graph.nodes if n.op == "aten"}
    assert not targets & {"aten.addmm.default", "aten.baddbmm.default"}, targets
    ref, new = reference_and_new(path, new_cls)
    new._tw_general = None  # the fast path must run
    for seed in range(3):
        torch.manual_seed(100 + seed)
        inp = torch.randn(*map(int, x.split(",")))
        with torch.no_grad():
            assert torch.allclose(new(inp), ref(inp), atol=1e-5, rtol=1e-5)


def test_zero_beta_keeps_the_library_call(tmp_path):
    # beta = 0 ignores the bias, NaN and inf included: nothing to fold.
    path = write_problem(tmp_path, "beta0", SOURCE.format(expr="torch.addmm(self.b, x, self.w, beta=0.0)",
                                                           x="24, 40", w="40, 36", b="36"))
    _, result = emulated_model(path, tmp_path)
    assert not any(line.startswith("fold_library_bias") for line in result.plan.graph.log)
