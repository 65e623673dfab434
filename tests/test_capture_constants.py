"""Constants made inside forward, and forward that depends on tensor values: what capture makes of each."""
from __future__ import annotations

import textwrap

import pytest
import torch

from helpers import Fn, graphs, kernels
from torchweld.capture import capture
from torchweld.interp import run_graph
from torchweld.pipeline import compile_source
from torchweld.problem import load_problem


def _problem(tmp_path, body: str, inputs: str = "[torch.randn(16, 1024)]"):
    """A problem file whose forward(self, x) is `body` (its first line is line 6)."""
    path = tmp_path / "p.py"
    lines = ["import torch", "import torch.nn as nn", "", "class Model(nn.Module):", "    def forward(self, x):",
             textwrap.indent(body, " " * 8), "", f"def get_inputs():\n    return {inputs}", "",
             "def get_init_inputs():\n    return []", ""]
    path.write_text("\n".join(lines))
    return load_problem(path)


def test_scalar_constant_folds_into_the_kernel(tmp_path):
    """`torch.min(x, torch.tensor(c))` used to stop capture at `get_attr _tensor_constant0`."""
    source, reason = compile_source(_problem(tmp_path, "return torch.min(x, torch.tensor(0.5)) * 2"))
    assert reason is None
    assert "minimum(x0, 0.5)" in source and "_tw_general" in source


def test_scalar_constants_fold_as_numbers():
    fn = lambda s, x: torch.where(x > 0, torch.min(x, torch.tensor(0.25)), torch.tensor(float("nan")))
    _, g = graphs(fn, torch.randn(8, 32))
    assert [n.op for n in g.nodes if n.op not in ("input",)] == ["gt", "minimum", "where"]
    x = torch.randn(8, 32)
    assert torch.equal(run_graph(g, {}, [x]).isnan(), fn(None, x).isnan())


def test_tensor_constant_is_a_literal_made_on_the_device():
    fn = lambda s, x: (x * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1)
    x = torch.randn(2, 3, 4, 4)
    g = capture(Fn(fn), [x])
    made = [n for n in g.nodes if n.target == "torch.tensor"]
    assert len(made) == 1 and made[0].shape == (3,) and made[0].attr("dtype") is torch.float32
    assert isinstance(made[0].attr("device"), torch.device)  # NOTE: printed as forward's `_dev`
    assert torch.equal(run_graph(g, {}, [x]), fn(None, x))
    assert len(kernels(fn, x).kernels) == 1


def test_constant_dtype_is_kept():
    fn = lambda s, x: x + torch.tensor([1, 2, 3], dtype=torch.int64)
    g = capture(Fn(fn), [torch.randn(4, 3)])
    made = next(n for n in g.nodes if n.target == "torch.tensor")
    assert made.dtype == "int64" and made.args == ((1, 2, 3),)


def test_uniform_constant_is_a_fill():
    g = capture(Fn(lambda s, x: x * torch.tensor([2.0, 2.0, 2.0])), [torch.randn(4, 3)])
    assert [n.target for n in g.nodes if n.op == "aten"] == ["aten.full.default"]


@pytest.mark.parametrize("body, line, text", [
    ("if x.sum() > 0:\n    return x * 2\nreturn x - 1", 6, "if x.sum() > 0:"),
    ("idx = torch.nonzero(x > 0)\nif idx.shape[0] > 10:\n    return x * 2\nreturn x", 7, "if idx.shape[0] > 10:"),
    ("y = x[x > 0]\nreturn y.sum()", 6, "y = x[x > 0]"),
])
def test_data_dependent_forward_names_the_line(tmp_path, body, line, text):
    """Used to fall back with PyTorch's `GuardOnDataDependentSymNode ... Eq(u0, 1)`."""
    _, reason = compile_source(_problem(tmp_path, body))
    assert reason is not None and "\n" not in reason
    assert f"p.py:{line} (`{text}`)" in reason and "tensor's values" in reason
    assert "u0" not in reason


def test_view_after_a_dropped_copy_becomes_a_reshape():
    """matmul traces `reshape` of a head-split q as clone + _unsafe_view; capture drops the clone, and
    the view of q's own strides (no view can take them) failed at run time in the emitted file."""
    def attention(s, x):
        q = x.view(2, 16, 3, 4, 4).permute(2, 0, 3, 1, 4)[0]
        return q @ q.transpose(-2, -1)

    x = torch.randn(2, 16, 48)
    g = capture(Fn(attention), [x])
    assert "aten.reshape.default" in {n.target for n in g.nodes}
    assert torch.allclose(run_graph(g, {}, [x]), attention(None, x))


def test_integer_scalar_constant_folds_into_a_float_op():
    fn = lambda s, x: torch.min(x * torch.tensor(3), torch.tensor(2, dtype=torch.int32)) + torch.tensor(True)
    x = torch.randn(4, 8)
    _, g = graphs(fn, x)
    assert not [n for n in g.nodes if n.op == "aten"] and len(kernels(fn, x).kernels) == 1
    assert torch.equal(run_graph(g, {}, [x]), fn(None, x))
