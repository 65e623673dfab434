"""A runtime sequence length: where every input is (batch, sequence, features) and each token is computed on
its own (linears, norms, softmax and reductions over the features, splits, heads viewed off the features),
one emission runs its kernels, not the original forward, at other batch sizes and sequence lengths on the CPU
emulator, against eager. Where tokens mix (attention, a mean or scan over the sequence, a last-token pick, a
constant made from the length) the sequence stays specialised and the batch alone is a runtime size."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch

from emulator import GXX, emulated_model, launching, mismatch, reference_and_new, write_problem
from torchweld.codegen.registry import kind_of
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

SOURCE = '''"""A runtime sequence test model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x, y):
        return {expr}


def get_inputs():
    return [torch.randn({B}, {S}, 8), torch.randn({B}, {S}, 8)]


def get_init_inputs():
    return []
'''
B, S = 3, 5  # the captured batch and sequence length
# name -> (module attributes, forward's expression of x and y, both (B, S, 8), the kinds it must hold)
MODELS = {
    "linear_swish_residual": ("self.fc = nn.Linear(8, 8)", "x + F.silu(self.fc(x)) * torch.sigmoid(y)", {"pointwise"}),
    "layer_norm": ("self.ln = nn.LayerNorm(8)", "F.gelu(self.ln(x + y))", {"reduce"}),
    "rmsnorm": ("self.w = nn.Parameter(torch.randn(8))",
                "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w + y", {"rows"}),
    "linear_softmax": ("self.fc = nn.Linear(8, 6)", "torch.softmax(self.fc(x) * 0.5, dim=-1)", {"reduce"}),
    "mlp": ("self.fc1 = nn.Linear(8, 16)\n        self.fc2 = nn.Linear(16, 8)", "self.fc2(F.gelu(self.fc1(x))) + y",
            {"pointwise"}),
    "swiglu": ("self.fc = nn.Linear(8, 12)", "(lambda a, b: F.silu(a) * b)(*self.fc(x).split(6, dim=-1)) - y.sum(-1, True)",
               {"pointwise", "reduce"}),
    "heads": ("self.fc = nn.Linear(8, 8)",  # (B*S, 8) -> (B, S, 2, 4) -> (B, S, 8): the sequence read off x
              "torch.softmax(self.fc(x).view(x.size(0), x.size(1), 2, 4), -1).flatten(2) * y", {"reduce"}),
    "token_logsumexp": ("", "torch.logsumexp(x * y, -1) + 1.0", {"reduce"}),
    "feature_cumsum": ("", "torch.cumsum(torch.tanh(x), -1) * y", {"scan"}),
    "feature_cat": ("", "torch.cat([x, torch.sigmoid(y)], -1) * 2.0", {"concat"}),
    # q, k, v from one linear, unbound from a stack in front; causal sdpa within each sample; heads merged back
    "sdpa_block": ("self.qkv = nn.Linear(8, 24)\n        self.ln = nn.LayerNorm(8)",
                   "self.ln(y + (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)"
                   ".reshape(x.size(0), x.size(1), 8))(*self.qkv(x).view(x.size(0), x.size(1), 3, 2, 4)"
                   ".permute(2, 0, 3, 1, 4).unbind(0)))", {"reduce"}),
}
# name -> (module attributes, forward's expression): each mixes tokens, so the sequence stays specialised
REFUSED = {
    "mean_over_tokens": ("", "torch.relu(x).mean(1) + y[:, 0]"),
    "softmax_over_tokens": ("", "torch.softmax(x, dim=1) * y"),
    "attention": ("", "torch.softmax((x @ y.transpose(-2, -1)) * 0.5, dim=-1) @ y"),
    "scan_over_tokens": ("", "torch.cumsum(x, 1) + y"),
    "last_token": ("", "torch.tanh(x[:, -1]) * y[:, -1]"),
    "length_constant": ("", "torch.relu(x) / x.size(1) + y"),  # 1 / 5 is baked into the kernel
    "positional_param": ("self.pos = nn.Parameter(torch.randn(5, 8))", "torch.relu(x + self.pos) * y"),
    "sdpa_mask_param": ("self.mask = nn.Parameter(torch.randn(5, 5))",
                        "torch.relu(F.scaled_dot_product_attention(x, y, y, attn_mask=self.mask)) + 1.0"),
    # the sdpa block's views, printed as reshapes while the length was a runtime size, are views again
    "sdpa_length_constant": ("self.qkv = nn.Linear(8, 24)",
                             "(lambda q, k, v: F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(x.size(0), "
                             "x.size(1), 8))(*self.qkv(x).view(x.size(0), x.size(1), 3, 2, 4).permute(2, 0, 3, 1, 4)"
                             ".unbind(0)) / x.size(1) + y"),
    "kernel_on_heads": ("", "torch.tanh(x.view(x.size(0), x.size(1), 2, 4).transpose(1, 2)).sum(-1).transpose(1, 2) + y[..., :2]"),
}


def _body(init: str, expr: str) -> str:
    return SOURCE.format(init=f"        {init}" if init else "        pass", expr=expr, B=B, S=S)


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("name", list(MODELS))
def test_kernels_run_at_other_sequence_lengths(tmp_path, name):
    init, expr, kinds = MODELS[name]
    path = write_problem(tmp_path, name, _body(init, expr))
    new_cls, result = emulated_model(path, tmp_path)
    plan = result.plan
    nodes = plan.graph.by_name()
    assert plan.guard.seq == S and plan.guard.batch[0] == B, plan.guard
    held = {kind_of(k, nodes) for k in plan.kernels if k.batch}
    assert kinds <= held and all(k.batch for k in plan.kernels), [(k.name, kind_of(k, nodes), k.batch) for k in plan.kernels]
    assert "the batch and the sequence length" in result.source and "x (batch, sequence, 8)" in result.source
    ref, new = reference_and_new(path, new_cls)
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    lib = sys.modules[type(new).__module__]._LIB
    for batch, seq in ((B, S), (1, 1), (1, 4 * S), (3 * B, 2 * S + 1), (2 * B, 1)):
        x, y = torch.randn(batch, seq, 8), torch.randn(batch, seq, 8)
        del lib.launched[:]
        with warnings.catch_warnings(record=True) as said, torch.no_grad():
            warnings.simplefilter("always")
            got, want = new(x, y), ref(x, y)
        assert set(lib.launched) == launching(plan) and not said, ((batch, seq), lib.launched, [str(w.message) for w in said])
        assert not mismatch(got, want, 1e-4, 1e-5), ((batch, seq), mismatch(got, want, 1e-4, 1e-5))


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_model_mixing_tokens_keeps_the_sequence_specialised(tmp_path, name):
    init, expr = REFUSED[name]
    result = compile_problem(load_problem(write_problem(tmp_path, name, _body(init, expr))))
    plan = result.plan
    assert plan.guard.seq == 0 and all(k.lead == 1 for k in plan.kernels), plan.guard
    assert f"x (batch, {S}, 8)" in result.source or f"every dim of x ({B}, {S}, 8)" in result.source
    assert "x.shape[1]" not in result.source.split("class ModelNew")[1].split("def _tw_general")[0]


@pytest.mark.parametrize("name", ["attention", "length_constant", "mean_over_tokens", "sdpa_length_constant"])
def test_a_model_mixing_tokens_keeps_its_runtime_batch(tmp_path, name):
    """These mix tokens, not samples: the batch stays a runtime size where the sequence cannot be one (a
    constant made from the length is found by tracing one token longer: pipeline.batch_checked)."""
    result = compile_problem(load_problem(write_problem(tmp_path, name, _body(*REFUSED[name]))))
    assert result.plan.guard.batch[0] == B and result.plan.guard.seq == 0 and all(k.batch for k in result.plan.kernels)
    assert "Runtime dims: the batch (dim 0 of every input" in result.source
    assert not any(n.target == "aten.reshape.default" for n in result.plan.graph.nodes)


def test_another_sequence_length_at_the_guard(tmp_path):
    """The guard bounds the tokens, checks the rank and every input's batch and length against the first's."""
    result = compile_problem(load_problem(write_problem(tmp_path, "ln", _body(*MODELS["layer_norm"][:2]))))
    forward = result.source.split("    def forward(")[1]
    assert "x.dim() != 3 or x.shape[2:] != (8,)" in forward and "y.shape[1] != x.shape[1]" in forward
    assert f"not 0 < x.shape[0] * x.shape[1] <= {result.plan.guard.batch[1]}" in forward
