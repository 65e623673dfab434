"""Reductions, softmax and norms: capture to anchor ops, kernel plans, emitted source, and the IR
interpreter against eager PyTorch (NaN/inf rows included). No GPU needed."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import graphs, kernels
from torchweld.codegen import module_source
from torchweld.tiling import layout
from torchweld.interp import run_graph
from torchweld.ir import Node, Ref, reduce_geometry
from torchweld.pipeline import compile_problem
from torchweld.plan import describe
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]


def _conv(s, x):
    return F.conv2d(x, s.w, s.b)


def _kinds(p):
    nodes = p.graph.by_name()
    return [(k.kind, nodes[k.anchor].op if k.anchor else "", len(k.nodes)) for k in p.kernels]


def test_conv_softmax_channels_scale_is_one_reduce_kernel():
    """conv -> softmax(dim=1) -> *2: the conv stays in cuDNN, its bias and `*2` join the softmax kernel."""
    p = kernels(lambda s, x: F.softmax(_conv(s, x), dim=1) * 2.0, torch.randn(2, 3, 8, 8),
                w=torch.randn(4, 3, 3, 3), b=torch.randn(4))
    assert _kinds(p) == [("reduce", "softmax", 3)]  # the conv's bias as prologue, softmax, then *2
    assert "aten.convolution.default" in describe(p)


def test_prologue_is_fused_and_not_written():
    p = kernels(lambda s, x: F.softmax(x * 3.0 + s.bias, dim=-1), torch.randn(64, 33), bias=torch.randn(33))
    (k,) = p.kernels
    assert k.kind == "reduce" and len(k.nodes) == 2 and k.outputs == (k.anchor,)
    assert set(k.inputs) == {"x0", "p0"}


def test_reduction_epilogue_on_reduced_shape():
    p = kernels(lambda s, x: torch.relu(torch.mean(x, dim=[2, 3], keepdim=True) + s.bias),
                torch.randn(4, 8, 5, 5), bias=torch.randn(8, 1, 1))
    assert _kinds(p) == [("reduce", "mean", 3)]
    assert p.kernels[0].outputs[0] != p.kernels[0].anchor


def test_broadcast_back_over_row_is_one_kernel():
    """x - mean(x): the mean's kernel also writes the subtraction, row by row (tests/test_rows.py)."""
    p = kernels(lambda s, x: x - x.mean(dim=-1, keepdim=True), torch.randn(16, 40))
    assert _kinds(p) == [("reduce", "mean", 2)]


def test_prologue_value_needed_elsewhere_is_not_recomputed():
    p = kernels(lambda s, x: (torch.sum(torch.exp(x), dim=1), torch.exp(x) * 2.0), torch.randn(8, 16))
    reduce = [k for k in p.kernels if k.kind == "reduce"]
    assert len(reduce) == 1 and len(reduce[0].nodes) == 1


def test_norms_capture_and_plan():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.gn, self.bn = nn.LayerNorm(32), nn.GroupNorm(4, 8), nn.BatchNorm2d(8)

        def forward(self, x, y):
            return F.gelu(self.ln(y)), F.silu(self.gn(x)), torch.relu(self.bn(x))

    from torchweld.capture import capture
    from torchweld.plan import plan
    from torchweld.simplify import simplify

    p = plan(simplify(capture(M(), [torch.randn(2, 8, 6, 6), torch.randn(4, 5, 32)])))
    assert sorted(_kinds(p)) == [("reduce", "batch_norm", 2), ("reduce", "group_norm", 2), ("reduce", "layer_norm", 2)]
    eval_plan = plan(simplify(capture(M().eval(), [torch.randn(2, 8, 6, 6), torch.randn(4, 5, 32)])))
    kinds = _kinds(eval_plan)  # eval batch norm is pointwise: (x - mean) * (w * rsqrt(var + eps)) + b, then relu
    assert not any(op == "batch_norm" for _, op, _ in kinds) and ("pointwise", "", 6) in kinds


def test_unsupported_stays_aten():
    """Reducing dims 0 and 2 of three is not one run in memory: it stays a PyTorch call."""
    g, s = graphs(lambda s, x: torch.sum(x, dim=[0, 2]), torch.randn(4, 5, 6))
    assert [n.op for n in s.nodes if n.op not in ("input", "param")] == ["aten"]


def test_geometry():
    n = Node("v", "softmax", (Ref("x"),), (2, 64, 8, 8), attrs=(("dims", (1,)),))
    assert reduce_geometry(n, (2, 64, 8, 8)) == (2, 64, 64)
    m = Node("v", "mean", (Ref("x"),), (2, 64, 1, 1), attrs=(("dims", (2, 3)), ("keepdim", True)))
    assert reduce_geometry(m, (2, 64, 8, 8)) == (128, 64, 1)
    assert reduce_geometry(Node("v", "sum", (), (), attrs=(("dims", (0, 2)),)), (4, 5, 6)) is None
    assert reduce_geometry(Node("v", "sum", (), (), attrs=(("dims", (0, 2)),)), (4, 1, 6)) == (1, 24, 1)
    g = Node("v", "group_norm", (), (), attrs=(("eps", 1e-5), ("groups", 4)))
    assert reduce_geometry(g, (2, 8, 6, 6)) == (8, 72, 1)


@pytest.mark.parametrize("O,R,I,vec,want", [
    (65536, 7, 1, 4, (256, 128, 2, True, 1, 1, True)),  # short rows: 128 rows a block, 4 elements a thread
    (1, 262144, 1, 4, (128, 1, 128, True, 4, 128, False)),  # one long row: 128 blocks, merged by a second kernel
    (16384, 4096, 1, 4, (256, 1, 256, True, 4, 1, True)),  # 16 values a thread stay in registers
    (64, 1 << 20, 1, 4, (1024, 1, 1024, True, 4, 4, False)),  # 64 rows over 256 blocks
    (32, 64, 4096, 1, (256, 32, 8, False, 1, 1, True)), (4096, 3, 5, 1, (256, 8, 32, False, 1, 1, True)),
    (1, 4096, 64, 1, (256, 32, 8, False, 1, 64, False)),  # two column tiles: R split 64 ways
    (1000, 99, 1, 4, (256, 8, 32, True, 1, 1, True)),  # 99 is no multiple of 4: scalar loads
])
def test_layout(O, R, I, vec, want):
    L = layout(O, R, I, vec, two_pass=True)
    assert (L.nt, L.tx, L.ty, L.rm, L.vec, L.split, L.cache) == want
    assert L.nt % 32 == 0 and L.chunk * L.split >= R > L.chunk * (L.split - 1)


SPECIAL_OPS = {
    "softmax": lambda x: torch.softmax(x * 2.0, dim=-1),
    "log_softmax": lambda x: F.log_softmax(x, dim=0),
    "logsumexp": lambda x: torch.logsumexp(x, dim=-1),
    "amax": lambda x: torch.amax(x, dim=-1, keepdim=True),
    "amin": lambda x: torch.amin(x, dim=0),
    "sum": lambda x: torch.sum(x + 1.0, dim=-1),
    "mean": lambda x: torch.mean(x, dim=(0, 1)),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
}


@pytest.mark.parametrize("op", sorted(SPECIAL_OPS))
def test_interpreter_matches_eager_on_special_rows(op):
    x = torch.randn(8, 11)
    x[0], x[1, 3], x[2, 5], x[3, ::2], x[6] = float("-inf"), float("inf"), float("nan"), float("-inf"), float("inf")
    fn = SPECIAL_OPS[op]
    g, s = graphs(lambda self, v: fn(v), x)
    assert any(n.is_anchor for n in s.nodes)
    got, want = run_graph(s, {}, [x.clone()]), fn(x.clone())
    assert torch.allclose(got, want, equal_nan=True, atol=1e-6)


def test_interpreter_batch_norm_updates_running_stats():
    bn = nn.BatchNorm2d(6)
    x = torch.randn(4, 6, 5, 5)
    from torchweld.capture import capture
    from torchweld.simplify import simplify

    g = simplify(capture(bn, [x]))
    state = {k: v.clone() for k, v in list(bn.named_parameters()) + list(bn.named_buffers())}
    got = run_graph(g, state, [x])
    with torch.no_grad():
        want = bn(x)
    assert torch.allclose(got, want, atol=1e-6)
    for k, v in bn.named_buffers():
        assert torch.allclose(state[k].double(), v.double()), k


def test_emitted_softmax_source():
    result = compile_problem(load_problem(ROOT / "problems" / "reduce" / "conv2d_softmax_channels_scale.py"))
    src = result.source
    assert "softmax with their pointwise neighbours" not in src  # the header counts, not templates
    assert "1 reductions/norms with their pointwise neighbours" in src
    assert "tw_block_reduce<1, 256, 32, 8, false>" in src and "tw_online(" in src
    assert "const float Sd = isinf(M) ? NAN : S;" in src
    assert "out_v6 = torch.empty_like(a_v4_lib, memory_format=torch.contiguous_format)" in src
    assert "#include <torch" not in src


def test_emitted_batch_norm_updates_buffers_in_place():
    src = compile_problem(load_problem(ROOT / "problems" / "norm" / "conv2d_batchnorm_relu.py")).source
    assert "float* __restrict__ in_p3" in src and "const float* __restrict__ in_p3" not in src
    assert "0.9f * in_p3[c] + 0.1f * mean" in src
    assert "p3, p4)" in src
    assert "p5.add_(1)" in src and "p5 = self._modules['bn']._buffers['num_batches_tracked']" in src


def test_reduce_kernels_in_module_source():
    result = compile_problem(load_problem(ROOT / "problems" / "norm" / "conv2d_group_norm_silu.py"))
    cu = module_source(list(result.plan.kernels), result.plan.graph)
    assert "tw_block_reduce" in cu and 'extern "C" int tw_launch_k0' in cu
    assert "rsqrtf(" in cu and "(o % 32u) * 4u + r / 4096u" in cu


def test_batch_norm_mode_is_guarded():
    """The kernels hold the captured mode of each batch norm; the other mode runs the original forward."""
    train = compile_problem(load_problem(ROOT / "problems" / "norm" / "conv2d_batchnorm_relu.py")).source
    assert "self._modules['bn'].training is not True" in train
    ev = compile_problem(load_problem(ROOT / "problems" / "norm" / "conv2d_batchnorm_eval_relu6.py")).source
    assert "self._modules['bn'].training is not False" in ev


def test_batch_norm_with_little_hw_puts_channels_side_by_side():
    result = compile_problem(load_problem(ROOT / "problems" / "norm" / "linear_batchnorm1d_train_tanh.py"))
    cu = module_source(list(result.plan.kernels), result.plan.graph)
    assert "tw_block_reduce<0, 256, 32, 8, false>" in cu and "const bool live = c < 1024u;" in cu


def test_comparison_in_a_prologue_compares_with_the_constant():
    """`(x > 0.5).float().sum(-1)`: the comparison's result is bool, its constant stays a float."""
    p = kernels(lambda s, x: (x > 0.5).float().sum(-1), torch.randn(8, 64))
    cu = module_source(list(p.kernels), p.graph)
    assert "const bool v1 = (x0 > 0.5f);" in cu and "> true" not in cu
