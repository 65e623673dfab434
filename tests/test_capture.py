"""Capture: the IR a module becomes, and no CPU-only op left for the GPU file to call."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import Fn
from torchweld.capture import CaptureError, capture, device_neutral
from torchweld.interp import run_graph
from torchweld.ir import Graph, Node, Ref, format_node


def test_params_inputs_and_origins():
    g = capture(Fn(lambda s, x: torch.relu(x + s.bias), bias=torch.randn(5)), [torch.randn(3, 5)])
    ops = {n.op: n for n in g.nodes}
    assert ops["param"].target == "bias" and ops["input"].shape == (3, 5)
    assert [n.op for n in g.nodes if n.is_pointwise] == ["add", "relu"]


def test_attention_traced_on_cpu_runs_the_device_neutral_op():
    """The CPU trace picks a CPU-only flash kernel; the IR calls SDPA, which picks per device."""
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    g = capture(Fn(lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v) * 2.0), [q, k, v])
    targets = [n.target for n in g.nodes if n.op == "aten"]
    assert targets == ["aten.scaled_dot_product_attention.default"]
    assert not any("for_cpu" in n.target for n in g.nodes)
    got = run_graph(g, {}, [q, k, v])
    assert torch.allclose(got, F.scaled_dot_product_attention(q, k, v) * 2.0, atol=1e-6)


def test_cpu_only_ops_are_refused():
    x = Node("x0", "input", (), (4,), "float32", target="x")
    bad = Node("v1", "aten", (Ref("x0"),), (4,), "float32", target="aten.mkldnn_something.default")
    with pytest.raises(CaptureError, match="CPU-only"):
        device_neutral(Graph((x, bad), ("v1",)))


def test_masked_fill_is_a_fused_where():
    """masked_fill(x, mask, value) -> where(mask, value, x): one kernel with the ops around it."""
    from helpers import graphs, kernels, run

    mask = torch.rand(6, 9) > 0.5
    fn = lambda s, x, m: (x * 0.5).masked_fill(m, float("-inf")).exp()
    x = torch.randn(6, 9)
    captured, simplified = graphs(fn, x, mask)
    assert [n.op for n in simplified.nodes if n.is_pointwise] == ["mul", "where", "exp"]
    assert len(kernels(fn, x, mask).kernels) == 1
    assert torch.equal(run(simplified, {}, [x, mask]), fn(None, x, mask))


# (forward as written, the IR capture gives: one right-hand side per node after the inputs)
POINTWISE = [
    ("rsub(x, c) -> sub(c, x)", lambda s, x, y: torch.rsub(x, 2.0), ["sub(2.0, x0)"]),
    ("hardtanh -> clamp", lambda s, x, y: F.hardtanh(x, -0.5, 0.5), ["clamp(x0, -0.5, 0.5)"]),
    ("clamp(min=lo) -> maximum", lambda s, x, y: torch.clamp(x, min=0.1), ["maximum(x0, 0.1)"]),
    ("clamp(max=hi) -> minimum", lambda s, x, y: torch.clamp(x, max=0.1), ["minimum(x0, 0.1)"]),
    ("clamp(lo, hi) -> clamp", lambda s, x, y: torch.clamp(x, -1.0, 1.0), ["clamp(x0, -1.0, 1.0)"]),
    ("gelu(tanh) -> gelu_tanh", lambda s, x, y: F.gelu(x, approximate="tanh"), ["gelu_tanh(x0)"]),
    ("leaky_relu's default slope", lambda s, x, y: F.leaky_relu(x), ["leaky_relu(x0, slope=0.01)"]),
    ("elu's defaults", lambda s, x, y: F.elu(x, 0.5), ["elu(x0, alpha=0.5, input_scale=1.0, scale=1.0)"]),
    ("x.to(dtype) -> cast", lambda s, x, y: x.to(torch.float16), ["cast(x0)"]),
    ("masked_fill(x, m, v) -> where(m, v, x)", lambda s, x, y: x.masked_fill(y > 0, 1.5),
     ["gt(x1, 0.0)", "where(v2, 1.5, x0)"]),
    ("an int constant becomes a float", lambda s, x, y: x - y * 3, ["mul(x1, 3.0)", "sub(x0, v2)"]),
    ("add with alpha stays in PyTorch", lambda s, x, y: torch.add(x, y, alpha=2), ["aten.add.Tensor(x0, x1, alpha=2)"]),
    ("floor division stays in PyTorch", lambda s, x, y: torch.div(x, 2, rounding_mode="floor"),
     ["aten.div.Tensor_mode(x0, 2, rounding_mode='floor')"]),
    ("integer tensors stay in PyTorch", lambda s, x, y: x.int() * 2,
     ["aten._to_copy.default(x0, dtype=torch.int32)", "aten.mul.Tensor(v2, 2)"]),
]


@pytest.mark.parametrize("name,fn,expected", POINTWISE, ids=[c[0] for c in POINTWISE])
def test_pointwise_conversions(name, fn, expected):
    g = capture(Fn(fn), [torch.randn(3, 4), torch.randn(3, 4)])
    got = [format_node(n).split("  #")[0].split(" = ", 1)[1] for n in g.nodes if n.op not in ("input", "param")]
    assert got == expected
