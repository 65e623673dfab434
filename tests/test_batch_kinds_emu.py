"""A runtime batch through every kernel kind where it is an outer dim of the kernel's iteration (reduce and
row kernels, softmax and norms, pools, depthwise convolutions, scans, cats) and through views that keep
dim 0: one emission runs its kernels, not the original forward, at batch 1, the captured one and 3x it,
on the CPU emulator against eager. Kernels that reduce over the batch keep every dim specialised."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch

from emulator import GXX, emulated_model, force_conv_layout, launching, mismatch, write_problem
from torchweld.codegen.registry import kind_of
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

SOURCE = '''"""A runtime batch test model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
'''
B = 4  # the captured batch
# name -> (module attributes, forward's expression, input shape after the batch, the kinds it must hold)
MODELS = {
    "softmax": ("", "torch.softmax(x * 2.0, dim=-1) + 1.0", (3, 40), {"reduce"}),
    "log_softmax_mid": ("", "torch.log_softmax(x, dim=1)", (6, 5), {"reduce"}),
    "layer_norm": ("self.ln = nn.LayerNorm(24)", "F.gelu(self.ln(x))", (5, 24), {"reduce"}),
    "group_norm": ("self.gn = nn.GroupNorm(2, 6)", "torch.relu(self.gn(x))", (6, 3, 5), {"reduce"}),
    "instance_norm": ("self.inorm = nn.InstanceNorm2d(3, affine=True)", "self.inorm(x) * 0.5", (3, 4, 5), {"reduce"}),
    "row_sums": ("", "x.sum(-1) + x.amax(1).mean(-1, keepdim=True)", (7, 9), {"reduce"}),
    "mean_hw": ("", "torch.tanh(x).mean(dim=(2, 3))", (5, 4, 6), {"reduce"}),
    "rows": ("", "x - x.mean(-1, keepdim=True)", (3, 33), {"rows"}),
    "split_sum": ("", "(x * x).sum(-1)", (40000,), {"reduce"}),
    "split_softmax": ("", "torch.softmax(x, dim=-1)", (40000,), {"reduce"}),
    "max_pool": ("", "F.max_pool2d(torch.relu(x), 3, stride=2, padding=1) * 2.0", (3, 9, 7), {"pool"}),
    "avg_pool": ("", "F.adaptive_avg_pool2d(x, (2, 3)) * F.avg_pool2d(x, 2)", (2, 4, 6), {"pool"}),
    "depthwise": ("self.dw = nn.Conv2d(5, 5, 3, padding=1, groups=5)", "torch.relu(self.dw(x))", (5, 7, 6),
                  {"depthwise"}),
    "cumsum": ("", "torch.cumsum(x, dim=-1) + torch.cumsum(x, dim=1)", (5, 12), {"scan"}),
    "cat": ("", "torch.cat([x, torch.sigmoid(x)], dim=1) * 3.0", (3, 5), {"concat"}),
    "flatten_linear": ("self.conv = nn.Conv2d(3, 4, 3)\n        self.fc = nn.Linear(4 * 3 * 2, 6)",
                       "self.fc(torch.relu(self.conv(x)).view(x.size(0), -1))", (3, 5, 4), set()),
    "flat_rows": ("", "torch.softmax(x.view(-1, 5), dim=-1)", (6, 5), {"reduce"}),  # (B, S, D) -> (B*S, D)
    "heads": ("self.fc = nn.Linear(8, 8)",  # (B, S, D) -> (B*S, D) for the linear, then heads moved behind dim 0
              "torch.softmax(self.fc(x).view(x.size(0), 6, 2, 4).permute(0, 2, 1, 3).reshape(x.size(0), 2, 24), -1)",
              (6, 8), {"reduce"}),
    # values read through strides that do not change with the batch: a split's part, a slice, a permute
    "swiglu": ("self.fc = nn.Linear(6, 10)", "(lambda a, b: F.silu(a) * b)(*self.fc(x).split(5, dim=-1))", (3, 6),
               {"pointwise"}),
    "glu_slice": ("", "x[:, :4] * torch.sigmoid(x[:, 4:])", (8, 3), {"pointwise"}),
    "select_step": ("", "torch.tanh(x[:, 1] + x[:, 2])", (4, 5), {"pointwise"}),
    "permuted_norm": ("self.ln = nn.LayerNorm(6)", "self.ln(x.permute(0, 2, 3, 1)) * 2.0", (6, 3, 4), {"reduce"}),
    "permuted_pool": ("", "F.adaptive_avg_pool1d(x.transpose(1, 2), 2) + 1.0", (6, 5), {"pool"}),
    "attention": ("", "torch.softmax((x @ x.transpose(-2, -1)) * 0.5, dim=-1) @ x", (2, 5, 3), {"reduce"}),
    "sdpa": ("", "F.scaled_dot_product_attention(x, x * 2.0, x) + 1.0", (2, 5, 3), {"pointwise"}),
    "qkv_unbind": ("self.fc = nn.Linear(8, 24)",  # (B, S, 3, H, D) -> (3, B, H, S, D), unbound into q, k, v
                   "(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v)"
                   "(*self.fc(x).view(x.size(0), 5, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0))", (5, 8), {"reduce"}),
    "time_major_step": ("", "torch.tanh(x.permute(1, 0, 2)[2]) * 2.0", (4, 3), {"pointwise"}),
    "bias_as_long_as_the_batch": ("self.b = nn.Parameter(torch.randn(4))", "(self.b + x) > 0.0", (4,), {"pointwise"}),
    "mv": ("self.w = nn.Parameter(torch.randn(7))", "torch.relu(x @ self.w)", (7,), {"pointwise"}),
    # a batch-first LSTM (its h0 and c0 zeros made at the batch, per call) and its last step
    "lstm_last_step": ("self.rnn = nn.LSTM(5, 6, num_layers=2, batch_first=True)", "torch.tanh(self.rnn(x)[0][:, -1]) * 2.0",
                       (3, 5), {"pointwise"}),
    # a GRU's final state, from an h0 forward makes at the batch: dim 1 of the states
    "gru_state": ("self.rnn = nn.GRU(5, 6, batch_first=True)",
                  "torch.relu(self.rnn(x, torch.zeros(1, x.size(0), 6))[1][0]) + 1.0", (3, 5), {"pointwise"}),
    # a state made from x at the batch (`x.new_zeros(B, H)`) beside a step of the input
    "new_zeros_state": ("self.fc = nn.Linear(9, 4)",
                        "(lambda h: torch.tanh(self.fc(torch.cat([x[:, 0], h], 1)) + h))(x.new_zeros(x.size(0), 4))",
                        (3, 5), {"pointwise"}),
}
# name -> forward's expression and input shape after the batch: each mixes samples
REFUSED = {
    "batch_norm_train": ("self.bn = nn.BatchNorm1d(6)", "self.bn(x)", (6, 5)),
    "sum_dim0": ("", "torch.softmax(x, dim=-1).sum(0)", (6, 5)),
    "mean_all": ("", "torch.relu(x).mean()", (6, 5)),
    "softmax_dim0": ("", "torch.softmax(x, dim=0)", (6, 5)),
    "view_across_samples": ("", "torch.softmax(x.view(6, -1), dim=-1)", (6, 5)),
    "kernel_over_a_stack": ("", "torch.relu(x.permute(1, 0, 2))", (6, 5)),  # the batch is dim 1 of the kernel
    "expand_new_leading_dim": ("", "torch.relu(x).expand(4, 4, 6, 5)", (6, 5)),  # dim 0 new: 4 is no batch
    "view_sized_by_a_constant": ("", "torch.softmax(x.view(8, -1), dim=-1)", (6, 5)),  # 8 = 2 x 4 only at batch 4
    "zeros_as_long_as_the_batch": ("", "torch.relu(x + torch.zeros(4, 6, 5))", (6, 5)),  # 4 is the batch by chance
    "lstm_sequence_first": ("self.rnn = nn.LSTM(5, 6)", "torch.tanh(self.rnn(x)[0]) * 2.0", (6, 5)),  # dim 0: steps
}


def _body(init: str, expr: str, rest: tuple) -> str:
    shape = ", ".join(map(str, (B, *rest)))
    return SOURCE.format(init=f"        {init}" if init else "        pass", expr=expr, shape=shape)


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("name", list(MODELS))
def test_kernels_run_at_other_batch_sizes(tmp_path, name):
    init, expr, rest, kinds = MODELS[name]
    path = write_problem(tmp_path, name, _body(init, expr, rest))
    new_cls, result = emulated_model(path, tmp_path)
    plan = result.plan
    nodes = plan.graph.by_name()
    assert plan.guard.batch and plan.guard.batch[0] == B, plan.guard
    held = {kind_of(k, nodes) for k in plan.kernels if k.batch}
    assert kinds is None or kinds <= held, (held, [(k.name, kind_of(k, nodes), k.batch) for k in plan.kernels])
    assert all(k.batch for k in plan.kernels if nodes[k.outputs[0]].shape[:1] == (B,)), plan.kernels
    assert "Runtime dims: the batch" in result.source and "Specialised dims: the others, x (batch, " in result.source
    assert ("rows, planes or blocks" in result.source) == any(k.batch and k.kind != "pointwise" for k in plan.kernels)
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    force_conv_layout(new, False)  # NOTE: the emulator cannot time cuDNN's layouts
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    lib = sys.modules[type(new).__module__]._LIB
    for batch in (1, B, 3 * B):
        x = torch.randn(batch, *rest)
        del lib.launched[:]
        with warnings.catch_warnings(record=True) as said, torch.no_grad():
            warnings.simplefilter("always")
            got, want = new(x), ref(x)
        assert set(lib.launched) == launching(plan) and not said, (batch, lib.launched, [str(w.message) for w in said])
        assert not mismatch(got, want, 1e-4, 1e-5), (batch, mismatch(got, want, 1e-4, 1e-5))


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_kernel_mixing_samples_keeps_every_dim_specialised(tmp_path, name):
    init, expr, rest = REFUSED[name]
    result = compile_problem(load_problem(write_problem(tmp_path, name, _body(init, expr, rest))))
    assert result.plan.guard.batch == () and not any(k.batch for k in result.plan.kernels)
    assert f"Specialised dims: every dim of x ({B}, " in result.source


def test_the_same_model_without_the_mixing_op_gets_a_runtime_batch(tmp_path):
    """The refusals above are the op's: softmax over the last dim alone carries the batch."""
    body = _body("", "torch.softmax(x, dim=-1)", (6, 5))
    result = compile_problem(load_problem(write_problem(tmp_path, "plain", body)))
    assert result.plan.guard.batch and all(k.batch for k in result.plan.kernels)
