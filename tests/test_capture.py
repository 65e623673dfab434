"""Capture: the IR a module becomes, and no CPU-only op left for the GPU file to call."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import Fn
from torchweld.capture import CaptureError, capture, device_neutral
from torchweld.interp import run_graph
from torchweld.ir import Graph, Node, Ref


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
