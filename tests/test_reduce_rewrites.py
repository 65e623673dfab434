"""Reduce rewrites: the graph after the pass (table-driven), and the rewritten IR run through
interp.py against the original module on random fp32/fp64 inputs; preconditions that stop them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import Fn, graphs
from torchweld.capture import capture
from torchweld.interp import run_graph
from torchweld.simplify.reduce_rewrites import reduce_rewrites

# (name, fn, input shapes, param shapes, ops after the pass, words of its log line); "aten.x" is a
# call kept in PyTorch, a bare name a fused op. Each fn is a realistic use of the rewrite.
CASES = [
    ("linear_sum_features", lambda s, x: F.linear(x, s.w, s.b).sum(dim=1),
     [(9, 16)], {"w": (12, 16), "b": (12,)},
     ["aten.sum", "aten.mv", "aten.sum", "add"], "sum of the columns"),
    ("linear3d_mean_features_keepdim", lambda s, x: F.linear(x, s.w, s.b).mean(dim=-1, keepdim=True),
     [(3, 5, 16)], {"w": (12, 16), "b": (12,)},
     ["aten.view", "aten.mean", "aten.mv", "aten.view", "aten.mean", "aten.view", "add"], "mean of the columns"),
    ("linear_nobias_param_bias_sum", lambda s, x: (F.linear(x, s.w) + s.b).sum(-1),
     [(3, 5, 16)], {"w": (12, 16), "b": (12,)},
     ["aten.view", "aten.sum", "aten.mv", "aten.view", "aten.sum", "aten.view", "add"], "sum of the columns"),
    ("matmul_weight_sum_last", lambda s, x: torch.matmul(x, s.w).sum(-1),
     [(9, 16)], {"w": (16, 12)}, ["aten.sum", "aten.mv"], "sum of the columns"),
    ("bmm_scaled_mean_keys", lambda s, q, k: (torch.bmm(q, k.transpose(1, 2)) * 0.125).mean(-1),
     [(4, 7, 16), (4, 11, 16)], {}, ["mean", "aten.view", "aten.bmm", "aten.view", "mul"], "mean of the columns"),
    ("linear_sum_rows", lambda s, x: F.linear(x, s.w, s.b).sum(0),
     [(9, 16)], {"w": (12, 16), "b": (12,)},
     ["aten.t", "sum", "aten.view", "aten.mm", "aten.view", "mul", "add"], "sum of the rows"),
    ("linear3d_token_mean", lambda s, x: F.linear(x, s.w, s.b).mean(1),
     [(3, 5, 16)], {"w": (12, 16), "b": (12,)},
     ["aten.t", "mean", "aten.mm", "aten.view", "add"], "mean of the rows"),
    ("bmm_sum_rows", lambda s, a, b: torch.bmm(a, b).sum(1, keepdim=True),
     [(4, 7, 16), (4, 16, 11)], {}, ["sum", "aten.bmm"], "sum of the rows"),
    ("conv_bias_gap", lambda s, x: F.adaptive_avg_pool2d(F.conv2d(x, s.w, s.b), 1),
     [(2, 3, 10, 10)], {"w": (6, 3, 3, 3), "b": (6,)},
     ["aten.convolution", "mean", "aten.view", "add"], "mean of the conv without bias"),
    ("conv1d_bias_sum_length", lambda s, x: F.conv1d(x, s.w, s.b, padding=1).sum(-1),
     [(2, 3, 17)], {"w": (6, 3, 3), "b": (6,)},
     ["aten.convolution", "sum", "aten.view", "mul", "add"], "sum of the conv without bias"),
    ("conv1x1_mean_hw", lambda s, x: F.conv2d(x, s.w, s.b).mean((2, 3)),
     [(2, 8, 10, 10)], {"w": (6, 8, 1, 1), "b": (6,)},
     ["mean", "aten.convolution", "aten.view", "aten.view", "add"], "1x1 conv of the mean"),
    ("conv1x1_grouped_sum_hw_plus_param", lambda s, x: (F.conv2d(x, s.w, s.b, groups=2) + s.c).sum((-1, -2), keepdim=True),
     [(2, 8, 10, 10)], {"w": (6, 4, 1, 1), "b": (6,), "c": (6, 1, 1)},
     ["sum", "aten.convolution", "aten.view", "mul", "aten.view", "mul", "add", "add"], "1x1 conv of the sum"),
    ("conv3d_1x1_mean", lambda s, x: F.conv3d(x, s.w, s.b).mean((2, 3, 4)),
     [(2, 3, 4, 5, 5)], {"w": (6, 3, 1, 1, 1), "b": (6,)},
     ["mean", "aten.convolution", "aten.view", "aten.view", "add"], "1x1 conv of the mean"),
    ("convt_1x1_mean", lambda s, x: F.conv_transpose2d(x, s.w, s.b).mean((2, 3)),
     [(2, 3, 9, 9)], {"w": (3, 6, 1, 1), "b": (6,)},
     ["mean", "aten.convolution", "aten.view", "aten.view", "add"], "1x1 conv of the mean"),
    ("conv_channel_mean", lambda s, x: F.conv2d(x, s.w, s.b, padding=1).mean(1, keepdim=True),
     [(2, 3, 9, 9)], {"w": (6, 3, 3, 3), "b": (6,)},
     ["aten.view", "aten.mean", "aten.convolution", "aten.mean", "aten.view", "add"], "mean of its filters"),
    ("conv1x1_minus_shift_gap", lambda s, x: (F.conv2d(x, s.w) - s.c).mean((2, 3)),
     [(2, 3, 9, 9)], {"w": (6, 3, 1, 1), "c": (6, 1, 1)},
     ["mean", "aten.convolution", "aten.view", "aten.view", "mul", "add"], "1x1 conv of the mean"),
    ("shift_minus_scaled_conv_channel_sum", lambda s, x: ((s.c - F.conv2d(x, s.w, s.b) * 3.0) / 2.0 + s.d).sum(1),
     [(2, 3, 9, 9)], {"w": (6, 3, 3, 3), "b": (6,), "c": (6, 1, 1), "d": (1, 1, 7)},
     ["aten.view", "aten.sum", "aten.convolution", "aten.view", "aten.sum", "mul", "aten.sum", "mul", "mul", "div",
      "mul", "mul", "div", "add", "add", "div", "add"], "sum of its filters"),
    ("convt_channel_sum", lambda s, x: F.conv_transpose2d(x, s.w, s.b, stride=2).sum(1),
     [(2, 3, 9, 9)], {"w": (3, 4, 3, 3), "b": (4,)},
     ["aten.view", "aten.sum", "aten.convolution", "aten.view", "aten.sum", "add"], "sum of its filters"),
]


def _ops(graph) -> list[str]:
    return ["aten." + n.target.split(".")[1] if n.op == "aten" else n.op for n in graph.nodes
            if n.op not in ("input", "param")]


def _make(case, dtype, seed=0):
    _, fn, in_shapes, p_shapes, _, _ = case
    g = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(s, generator=g, dtype=dtype) for s in in_shapes]
    params = {k: torch.randn(s, generator=g, dtype=dtype) for k, s in p_shapes.items()}
    return inputs, params


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_graph_after_the_pass(case):
    inputs, params = _make(case, torch.float32)
    captured = capture(Fn(case[1], **params), inputs)
    after = reduce_rewrites(captured)
    assert _ops(after) == case[4], str(after)
    assert len(after.log) == 1 and case[5] in after.log[0], after.log


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rewritten_graph_matches_the_module(case, dtype):
    """The whole simplified graph (this pass and the ones after it) against eager, fresh inputs."""
    for seed in (1, 2):
        inputs, params = _make(case, dtype, seed)
        module = Fn(case[1], **params)
        _, simplified = graphs(case[1], *inputs, **params)
        assert any(line.startswith("reduce_rewrites") for line in simplified.log)
        with torch.no_grad():
            want = module(*[x.clone() for x in inputs])
        got = run_graph(simplified, params, [x.clone() for x in inputs])
        assert got.shape == want.shape and got.dtype == want.dtype
        # NOTE: the sums are reassociated: error relative to the largest output, fp64 tight
        tol = 2e-5 if dtype == torch.float32 else 1e-12
        scale = float(want.abs().max())
        assert torch.allclose(got, want, rtol=tol, atol=tol * scale), float((got - want).abs().max())


# (name, fn, input shapes, param shapes, dtype): cases the pass must leave alone.
UNTOUCHED = [
    ("fp16", lambda s, x: F.linear(x, s.w, s.b).sum(1), [(9, 16)], {"w": (12, 16), "b": (12,)}, torch.float16),
    ("bf16", lambda s, x: F.linear(x, s.w, s.b).sum(1), [(9, 16)], {"w": (12, 16), "b": (12,)}, torch.bfloat16),
    ("linear read twice", lambda s, x: (lambda y: y.sum(1) + y[:, 0])(F.linear(x, s.w, s.b)),
     [(9, 16)], {"w": (12, 16), "b": (12,)}, torch.float32),
    ("linear output returned too", lambda s, x: (lambda y: (y.sum(1), y))(F.linear(x, s.w, s.b)),
     [(9, 16)], {"w": (12, 16), "b": (12,)}, torch.float32),
    ("relu between", lambda s, x: torch.relu(F.linear(x, s.w, s.b)).sum(1),
     [(9, 16)], {"w": (12, 16), "b": (12,)}, torch.float32),
    ("sum over rows and features", lambda s, x: F.linear(x, s.w, s.b).sum(), [(9, 16)], {"w": (12, 16), "b": (12,)},
     torch.float32),
    ("addmm with alpha and beta", lambda s, x: torch.addmm(s.b, x, s.w, beta=0.5, alpha=2.0).sum(1),
     [(9, 16)], {"w": (16, 12), "b": (12,)}, torch.float32),
    ("bmm summed over its batch", lambda s, a, b: torch.bmm(a, b).sum(0), [(4, 7, 16), (4, 16, 11)], {},
     torch.float32),
    ("conv without bias, 3x3, global mean", lambda s, x: F.conv2d(x, s.w).mean((2, 3)),
     [(2, 3, 10, 10)], {"w": (6, 3, 3, 3)}, torch.float32),
    ("amax is not linear", lambda s, x: F.conv2d(x, s.w, s.b).amax((2, 3)),
     [(2, 3, 10, 10)], {"w": (6, 3, 1, 1), "b": (6,)}, torch.float32),
    ("sum with a dtype", lambda s, x: F.linear(x, s.w, s.b).sum(1, dtype=torch.float64),
     [(9, 16)], {"w": (12, 16), "b": (12,)}, torch.float32),
]


@pytest.mark.parametrize("case", UNTOUCHED, ids=[c[0] for c in UNTOUCHED])
def test_preconditions_leave_the_graph_alone(case):
    _, fn, in_shapes, p_shapes, dtype = case
    inputs = [torch.randn(s).to(dtype) for s in in_shapes]
    params = {k: torch.randn(s).to(dtype) for k, s in p_shapes.items()}
    captured = capture(Fn(fn, **params), inputs)
    after = reduce_rewrites(captured)
    assert after is captured and not after.log, after.log


# Rewrites that apply, but only as the weaker rule because a precondition of the stronger one fails.
WEAKER = [
    ("1x1 conv with stride 2 is not pooled first", lambda s, x: F.conv2d(x, s.w, s.b, stride=2).mean((2, 3)),
     {"w": (6, 3, 1, 1), "b": (6,)}),
    ("1x1 conv with padding is not pooled first", lambda s, x: F.conv2d(x, s.w, s.b, padding=1).mean((2, 3)),
     {"w": (6, 3, 1, 1), "b": (6,)}),
    ("1x1 conv reduced over H only is not pooled first", lambda s, x: F.conv2d(x, s.w, s.b).mean(2),
     {"w": (6, 3, 1, 1), "b": (6,)}),
    # NOTE: 2 input channels a group: a depthwise conv (1 a group) is a kernel of its own, not a library call
    ("grouped conv channel sum keeps its filters", lambda s, x: F.conv2d(x, s.w, s.b, groups=3).sum(1),
     {"w": (6, 2, 3, 3), "b": (6,)}, (2, 6, 10, 10)),
]


@pytest.mark.parametrize("case", WEAKER, ids=[c[0] for c in WEAKER])
def test_only_the_bias_moves_where_the_stronger_rule_does_not_hold(case):
    _, fn, p_shapes, *x_shape = case
    x = torch.randn(*(x_shape or [(2, 3, 10, 10)])[0])
    params = {k: torch.randn(s) for k, s in p_shapes.items()}
    captured = capture(Fn(fn, **params), [x])
    after = reduce_rewrites(captured)
    assert len(after.log) == 1 and "conv without bias" in after.log[0], after.log
    convs = [n for n in after.nodes if n.target == "aten.convolution.default"]
    nodes = after.by_name()
    assert len(convs) == 1 and nodes[convs[0].args[0]].op == "input" and convs[0].args[2] is None
    assert nodes[convs[0].args[1]].target == "w"  # the conv's own filters, not summed ones
    got = run_graph(after, params, [x])
    assert torch.allclose(got, fn(type("P", (), params), x), rtol=1e-5, atol=1e-5)


def test_nan_in_a_row_stays_in_that_row():
    """A NaN input poisons its own output row only, as in the reference."""
    case = CASES[0]
    inputs, params = _make(case, torch.float32)
    inputs[0][3, 5] = float("nan")
    _, simplified = graphs(case[1], *inputs, **params)
    got = run_graph(simplified, params, inputs)
    want = Fn(case[1], **params)(*inputs).detach()
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and bool(torch.isnan(got[3]))
    assert torch.allclose(got[~torch.isnan(want)], want[~torch.isnan(want)], rtol=1e-5, atol=1e-4)


def test_parameter_sums_are_made_in_forward_on_every_call(tmp_path):
    """The summed weight is computed from the parameter inside forward, never stored on the module."""
    from torchweld.pipeline import compile_problem
    from torchweld.problem import load_problem
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "problems" / "reduce" / "linear_sum_features.py"
    source = compile_problem(load_problem(path)).source
    forward = source[source.index("    def forward("):source.index("    def _tw_general(")]
    assert "p0 = self._modules['fc']._parameters['weight']" in forward
    assert "torch.sum(p0, [0], False)" in forward
    assert "torch.mv(x, " in forward
    init = source[source.index("class ModelNew"):source.index("    def forward(")]
    assert "sum" not in init and "register_buffer" not in init


def test_explain_shows_the_rewrite(capsys):
    from pathlib import Path

    from torchweld.cli import main

    path = Path(__file__).resolve().parents[1] / "problems" / "reduce" / "conv1x1_adaptive_avg_pool.py"
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    rewrites = out[out.index("# Rewrites"):out.index("# Simplified graph")]
    assert "reduce_rewrites: v4 = mean over [2, 3] of v3 (convolution) -> 1x1 conv of the mean of x0" in rewrites
    plan = out[out.index("# Kernel plan"):]
    assert "mean(x0, dims=[2, 3], keepdim=True)" in plan and "(64, 512, 1, 1) f32  [library]" in plan
