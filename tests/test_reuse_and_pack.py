"""Two ways the emitted forward moves fewer bytes around its library calls:

- a pointwise kernel writes its output over an operand forward made itself and reads nowhere else
  (Plan.written_over, plan/memory.py): the GEMM's result, read once by the activation after it;
- a GEMM reads a linear's weight packed (in, out) once per version of the weight (Plan.packed_weights,
  plan/gemm_pack.py).

Plan-level cases check where each must not happen; emulator cases (tests/emulator.py) check the results against eager, also after the weights change."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from emulator import GXX, emulated_model, reference_and_new, write_problem
from torchweld.pipeline import Options, compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
REUSE = "each element before it is written"

SOURCE = '''"""Test model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(40, 36)
        self.fc2 = nn.Linear(36, 20)
        self.w = nn.Parameter(torch.randn(36, 40) * 0.2)

    def forward(self, x):
{body}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
'''


def _compile(tmp_path, name, body, shape="24, 40"):
    path = write_problem(tmp_path, name, SOURCE.format(body=body, shape=shape))
    return path, compile_problem(load_problem(path))


REUSE_CASES = {
    # body, how many outputs are written over an operand
    "linear_gelu": ("        return F.gelu(self.fc(x))", 1),
    "two_linears": ("        return torch.tanh(self.fc2(torch.relu(self.fc(x))))", 2),
    "gemm_result_returned": ("        y = self.fc(x)\n        return torch.relu(y), y", 0),
    "gemm_result_read_twice": ("        y = self.fc(x)\n        return torch.relu(y) + y.sum(dim=1, keepdim=True)", 0),
    "input_only": ("        return torch.relu(x) * 2.0", 0),
    "bool_output": ("        return self.fc(x) > 0.5", 0),
    "bias_broadcast": ("        return torch.sigmoid(x @ self.w.t() + self.fc.bias)", 1),
}


@pytest.mark.parametrize("name", REUSE_CASES)
def test_reuse_only_where_nothing_else_reads(name, tmp_path):
    body, expected = REUSE_CASES[name]
    _, result = _compile(tmp_path, name, body)
    reused = result.plan.written_over
    assert len(reused) == expected, (reused, str(result.plan.graph))
    assert result.source.count(REUSE) == expected
    nodes = result.plan.graph.by_name()
    for out, operand in reused.items():
        assert nodes[out].dtype == nodes[operand].dtype and nodes[operand].name not in result.plan.graph.outputs


def test_no_reuse_where_a_channels_last_build_reads_tiles():
    # NOTE: conv_layout hands a channels-last result to a kernel with a `_cl` build (tiles through shared memory)
    problem = load_problem(ROOT / "problems" / "conv" / "conv2d_3x3_bn_eval_relu.py")
    result = compile_problem(problem)
    assert "_cl(" in result.source and REUSE not in result.source and not result.plan.written_over
    # without layout planning the kernel has no `_cl` build, and writes over the convolution's result
    flat = compile_problem(problem, Options(layout_plan=False))
    assert "_cl(" not in flat.source and list(flat.plan.written_over.values()) == ["v9_lib"]
    assert flat.source.count(REUSE) == 1


PACK_CASES = {
    "linear": ("        return F.relu(self.fc(x))", ["fc.weight"]),
    "two_linears": ("        return self.fc2(F.gelu(self.fc(x)))", ["fc.weight", "fc2.weight"]),
    "linear3d": ("        return F.silu(self.fc(x))", ["fc.weight"]),
    "matmul_t": ("        return torch.relu(torch.matmul(x, self.w.t()))", ["w"]),
    "transpose_also_returned": ("        wt = self.w.t()\n        return torch.relu(x @ wt), wt * 2.0", []),
    "transpose_sliced": ("        return torch.relu(x @ self.w.t()[:, :20])", []),
}


@pytest.mark.parametrize("name", PACK_CASES)
def test_packed_weights(name, tmp_path):
    body, expected = PACK_CASES[name]
    _, result = _compile(tmp_path, name, body, "2, 24, 40" if name == "linear3d" else "24, 40")
    nodes = result.plan.graph.by_name()
    packed = result.plan.packed_weights
    assert sorted(nodes[p].target for p in packed.values()) == sorted(expected), str(result.plan.graph)
    assert result.source.count("= _tw_pack(self, ") == len(expected)
    assert ("def _tw_pack(" in result.source) == bool(expected)


EMU_CASES = {
    "linear_gelu": "        return F.gelu(self.fc(x))",
    "two_linears": "        return torch.tanh(self.fc2(torch.relu(self.fc(x))))",
    "bias_broadcast": "        return torch.sigmoid(x @ self.w.t() + self.fc.bias)",
}


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("name", EMU_CASES)
def test_emulated_matches_eager_and_repacks(name, tmp_path):
    path = write_problem(tmp_path, name, SOURCE.format(body=EMU_CASES[name], shape="24, 40"))
    new_cls, result = emulated_model(path, tmp_path)
    assert REUSE in result.source and "_tw_pack(self, " in result.source
    ref, new = reference_and_new(path, new_cls)
    new._tw_general = None  # the fast path must run

    def check(tag):
        for seed in range(3):
            torch.manual_seed(200 + seed)
            x = torch.randn(24, 40)
            with torch.no_grad():
                got, want = new(x), ref(x)
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (tag, (got - want).abs().max())

    check("first")
    # NOTE: a packed weight made from the old values would fail these
    torch.manual_seed(7)
    fresh = type(ref)()
    ref.load_state_dict(fresh.state_dict())
    new.load_state_dict(fresh.state_dict())
    check("after load_state_dict")
    with torch.no_grad():
        for m in (ref, new):
            m.fc.weight.mul_(-1.5)
            m.w.add_(0.25)
    check("after an in-place update")


BUFFER_SOURCE = '''"""Test model."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("stat", torch.ones(40))

    def forward(self, x):
{body}


def get_inputs():
    return [torch.randn(24, 40)]


def get_init_inputs():
    return []
'''
COPY_CASES = {
    # body, how many copies the kernel making their source takes over
    "mean_into_buffer": ("        self.stat.copy_(x.mean(dim=0))\n        return torch.relu(x)", 1),
    "read_after_copy": ("        self.stat.copy_(x.mean(dim=0))\n        return x * self.stat", 0),  # the mean has two readers
    # NOTE: the product reads the old values; written early by the mean's kernel, they would be the new ones
    "read_before_copy": ("        m = x.mean(dim=0)\n        y = x * self.stat\n        self.stat.copy_(m)\n        return y", 0),
    "source_also_returned": ("        m = x.mean(dim=0)\n        self.stat.copy_(m)\n        return x * m, m", 0),
    "kernel_reads_buffer": ("        self.stat.copy_(self.stat * 0.9 + x.mean(dim=0) * 0.1)\n        return torch.relu(x)", 0),
}


@pytest.mark.parametrize("name", COPY_CASES)
def test_copy_into_buffer(name, tmp_path):
    body, expected = COPY_CASES[name]
    path = write_problem(tmp_path, name, BUFFER_SOURCE.format(body=body))
    result = compile_problem(load_problem(path))
    into = result.plan.written_into
    assert len(into) == expected, (into, str(result.plan.graph))
    forward = result.source[result.source.index("    def forward("):result.source.index("    def _tw_general(")]
    assert forward.count(".copy_(") == 1 - expected, forward


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("name", ["mean_into_buffer", "read_after_copy", "read_before_copy", "kernel_reads_buffer"])
def test_copy_into_buffer_emulated(name, tmp_path):
    body, _ = COPY_CASES[name]
    path = write_problem(tmp_path, name, BUFFER_SOURCE.format(body=body))
    new_cls, _ = emulated_model(path, tmp_path)
    ref, new = reference_and_new(path, new_cls)
    new._tw_general = None
    for step in range(2):  # NOTE: the second step reads what the first wrote into the buffer
        torch.manual_seed(300 + step)
        x = torch.randn(24, 40)
        with torch.no_grad():
            got, want = new(x), ref(x)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (step, (got - want).abs().max())
        assert torch.allclose(new.stat, ref.stat, atol=1e-6, rtol=1e-6), step
