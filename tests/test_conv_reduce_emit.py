"""Reductions folded into our convolution (`--conv-ours`, plan/conv_ours._fold_reduce) through the emitted
file on the CPU emulator: global pools (mean, sum, amax over every pixel, keepdim or not, after a pointwise
chain, with per-channel ops after them), channel softmaxes and channel max/mean, 1-d to 3-d, grouped, transposed, fp16,
against eager; and where the plan folds them and where it says no."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from emulator import one_input_problem, reference_and_new, write_problem
from test_conv_emit_emu import _emulated
from torchweld.options import Options
from torchweld.pipeline import compile_problem
from torchweld.plan.conv_ours import OursConv
from torchweld.problem import load_problem

# name: (forward's return, __init__'s body, the inputs, the reduction folded in or "" where none may be)
PROBLEMS = {
    "c2_gap_relu": ("torch.relu(self.conv(x)).mean(dim=(2, 3))", "self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)",
                    "torch.randn(3, 8, 7, 9),", "mean"),
    "c2_adaptive_gain": ("torch.nn.functional.adaptive_avg_pool2d(torch.tanh(self.conv(x)), 1) * self.g",
                         "self.conv = torch.nn.Conv2d(8, 12, 3, stride=2, padding=1, groups=4); "
                         "self.g = torch.nn.Parameter(torch.randn(12, 1, 1))", "torch.randn(2, 8, 11, 10),", "mean"),
    "c3_amax_res": ("torch.amax(self.conv(x) + x, dim=(2, 3, 4), keepdim=True)",
                    "self.conv = torch.nn.Conv3d(8, 8, 3, padding=1)", "torch.randn(2, 8, 3, 5, 4),", "max"),
    "c1_sum_sigmoid": ("torch.sigmoid(self.conv(x)).sum(dim=-1)", "self.conv = torch.nn.Conv1d(8, 16, 5, padding=2)",
                       "torch.randn(2, 8, 45),", "sum"),
    "t2_gmin": ("torch.amin(self.conv(x), dim=(2, 3))",
                "self.conv = torch.nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1)",
                "torch.randn(2, 8, 5, 4),", "min"),
    "c2_softmax_scale": ("torch.softmax(self.conv(x), dim=1) * self.s",
                         "self.conv = torch.nn.Conv2d(8, 24, 3, padding=1); self.s = torch.nn.Parameter(torch.tensor(2.0))",
                         "torch.randn(2, 8, 7, 9),", "softmax"),
    "t2_log_softmax": ("torch.log_softmax(self.conv(x), dim=1)",
                       "self.conv = torch.nn.ConvTranspose2d(8, 21, 2, stride=2)", "torch.randn(2, 8, 5, 4),", "log_softmax"),
    "c2_f16_softmax_gain": ("torch.softmax(torch.relu(self.conv(x)), dim=1) * self.g",
                            "self.conv = torch.nn.Conv2d(16, 40, 3, padding=1).half(); "
                            "self.g = torch.nn.Parameter(torch.rand(40, 1, 1).half())", "torch.randn(2, 16, 6, 6).half(),",
                            "softmax"),
    "c3_softmax": ("torch.softmax(self.conv(x), dim=1)", "self.conv = torch.nn.Conv3d(4, 16, 3, padding=1)",
                   "torch.randn(2, 4, 3, 4, 5),", "softmax"),
    "c2_chan_amax_tanh": ("torch.tanh(torch.amax(self.conv(x), dim=1, keepdim=True))",
                          "self.conv = torch.nn.Conv2d(8, 48, 3, padding=1)", "torch.randn(2, 8, 7, 9),", "chan_max"),
    "c1_chan_mean": ("torch.relu(self.conv(x)).mean(dim=1) * 3.0", "self.conv = torch.nn.Conv1d(8, 24, 3, padding=1)",
                     "torch.randn(2, 8, 19),", "chan_mean"),
}
# The convolution's (pointwise-folded) result read by a pixel reduction and returned too: the kernel
# writes both (`also`), the reduce kernel's step runs it.
STORED = {
    "c2_relu_and_amax": ("(y := torch.relu(self.conv(x))), y.amax(dim=(2, 3), keepdim=True) * 2.0",
                         "self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)", "torch.randn(3, 8, 7, 9),", "max"),
    "c3_bn_and_mean_bias": ("(y := self.bn(self.conv(x))), y.mean(dim=(2, 3, 4)) + self.b",
                            "self.conv = torch.nn.Conv3d(8, 8, 3, padding=1, bias=False); self.bn = torch.nn.BatchNorm3d(8); "
                            "self.bn.running_mean.normal_(); self.b = torch.nn.Parameter(torch.randn(8)); self.eval()",
                            "torch.randn(2, 8, 3, 4, 5),", "mean"),
}
REFUSED = {  # the plan keeps the reduce kernel apart: (forward's return, __init__'s body, inputs, why)
    "softmax_groups_wide": ("torch.softmax(self.conv(x), dim=1)", "self.conv = torch.nn.Conv2d(8, 160, 1)",
                            "torch.randn(2, 8, 4, 4),", "at most 128"),
    "mean_over_h": ("self.conv(x).mean(dim=2)", "self.conv = torch.nn.Conv2d(8, 16, 3)", "torch.randn(2, 8, 6, 6),",
                    "not every pixel"),
    "mean_broadcast_back": ("(y := self.conv(x)) - y.mean(dim=(2, 3), keepdim=True)",
                            "self.conv = torch.nn.Conv2d(8, 16, 3)", "torch.randn(2, 8, 6, 6),", "before its mean after it"),
    "softmax_then_residual": ("torch.softmax(self.conv(x), dim=1) + x", "self.conv = torch.nn.Conv2d(8, 8, 1)",
                              "torch.randn(2, 8, 6, 6),", "after"),
}


def _problem(tmp: Path, name: str, table: dict) -> Path:
    body, init, inputs, _ = table[name]
    return one_input_problem(tmp, name, body, init, inputs)


def _compiled(tmp: Path, name: str, table: dict):
    """(the problem's path, its compile with our convolution, our convolution sites)."""
    path = _problem(tmp, name, table)
    result = compile_problem(load_problem(path), Options(conv_ours=True))
    return path, result, [s for s in result.plan.conv_ours.values() if isinstance(s, OursConv)]


def _each_way(path: Path, result, tmp: Path, inputs: str):
    """((cc, vec, way), eager's output, the emulated file's) for both loops, the element gather and cuDNN's way."""
    torch.manual_seed(1)
    xs = eval(f"[{inputs}]", {"torch": torch})
    for cc, vec, way in ((90, True, "ours"), (80, True, "ours"), (80, False, "ours"), (80, True, "cudnn")):
        ref, new = reference_and_new(path, _emulated(result, tmp, cc, vec, way))
        with torch.no_grad():
            yield (cc, vec, way), ref(*xs), new(*xs)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_folded_reduction_matches_eager_on_the_emulator(tmp_path, name):
    """Both loops (cc 9.0 and 8.0, 16-byte gathers) and the element gather, and cuDNN's way, against eager."""
    path, result, sites = _compiled(tmp_path, name, PROBLEMS)
    assert [s.reduce for s in sites] == [PROBLEMS[name][3]], list(result.plan.conv_ours.values())
    assert [k.kind for k in result.plan.kernels] == ["conv"]  # the reduce kernel is gone
    for (cc, vec, way), want, got in _each_way(path, result, tmp_path, PROBLEMS[name][2]):
        assert got.shape == want.shape and not got.isnan().any(), (cc, vec, way)
        tol = 1e-4 if want.dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m: f"{cc} {vec} {way}: {m}")


@pytest.mark.parametrize("name", list(REFUSED))
def test_plan_says_where_a_reduction_does_not_fold(tmp_path, name):
    _, _, sites = _compiled(tmp_path, name, REFUSED)
    assert sites and all(not s.reduce for s in sites), sites
    assert any(REFUSED[name][3] in s.no_fold for s in sites), [s.no_fold for s in sites]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.parametrize("name", list(STORED))
def test_stored_and_reduced_match_eager_on_the_emulator(tmp_path, name):
    """Both outputs (the full one and the reduction) of the one conv kernel, both loops, against eager."""
    path, result, sites = _compiled(tmp_path, name, STORED)
    assert [(s.reduce, bool(s.also)) for s in sites] == [(STORED[name][3], True)]
    assert [k.kind for k in result.plan.kernels] == ["conv"] and len(result.plan.kernels[0].outputs) == 2
    for (cc, vec, way), want, got in _each_way(path, result, tmp_path, STORED[name][2]):
        assert len(got) == len(want) == 2
        for g, w in zip(got, want):
            assert g.shape == w.shape and not g.isnan().any(), (cc, vec, way)
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=lambda m: f"{cc} {vec} {way}: {m}")


def test_squeeze_excite_keeps_the_store_and_folds_the_pool(tmp_path):
    """conv -> ReLU -> (mean -> linear -> sigmoid) x itself: the pool folds in beside the stored output, and
    the kernel runs at the pool's step (its output's other reader, the gate's product, comes later)."""
    path = write_problem(tmp_path, "se", """import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return (y := torch.relu(self.conv(x))) * torch.sigmoid(self.fc(y.mean(dim=(2, 3))))[:, :, None, None]


def get_inputs():
    return [torch.randn(2, 8, 6, 6)]


def get_init_inputs():
    return []
""")
    plan = compile_problem(load_problem(path), Options(conv_ours=True)).plan
    site = next(s for s in plan.conv_ours.values() if isinstance(s, OursConv))
    assert site.reduce == "mean" and site.also and site.kernel.outputs == site.kernel.nodes[2:]
    assert site.kernel.name in plan.steps and site.folded not in plan.steps and site.also not in plan.steps
    step = plan.steps.index(site.kernel.name)
    reader = next(k for k in plan.kernels if site.kernel.outputs[0] in k.inputs and k is not site.kernel)
    assert plan.steps.index(reader.name) > step
