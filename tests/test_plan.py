"""Kernel plans: how many kernels a graph becomes and what each holds (no GPU needed)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import kernels
from torchweld.plan import describe


def _conv(self, x):
    return F.conv2d(x, self.w, self.b)


def test_conv_then_chain_is_one_kernel():
    p = kernels(lambda s, x: torch.relu(_conv(s, x)) + s.bias, torch.randn(2, 3, 8, 8),
                w=torch.randn(4, 3, 3, 3), b=torch.randn(4), bias=torch.randn(4, 1, 1))
    assert len(p.kernels) == 1
    k = p.kernels[0]
    assert [p.graph.by_name()[m].op for m in k.nodes] == ["add", "relu", "add"]  # conv bias, relu, + bias
    assert k.shape == (2, 4, 6, 6)


def test_library_op_splits_chains():
    def fn(s, x):
        y = torch.sigmoid(x) * 2.0
        y = F.conv2d(y, s.w)
        return torch.tanh(y) - 1.0

    p = kernels(fn, torch.randn(2, 3, 8, 8), w=torch.randn(3, 3, 1, 1))
    assert len(p.kernels) == 2
    assert [s for s in p.steps if s.startswith("k") or "conv" in s] or p.steps


def test_value_read_three_times_is_loaded_once():
    p = kernels(lambda s, x: x * torch.sigmoid(x) + x, torch.randn(64, 33))
    assert len(p.kernels) == 1 and p.kernels[0].inputs == ("x0",)


def test_broadcast_parameter_math_is_inlined():
    """`bias * 2 + 1` has the bias's small shape: it is recomputed inside the big kernel."""
    p = kernels(lambda s, x: x * (s.bias * 2.0 + 1.0), torch.randn(4, 8, 5, 5), bias=torch.randn(8, 1, 1))
    assert len(p.kernels) == 1
    assert p.kernels[0].shape == (4, 8, 5, 5)


def test_small_value_needed_outside_is_not_inlined():
    p = kernels(lambda s, x: (x + torch.exp(s.bias), torch.exp(s.bias)), torch.randn(4, 8), bias=torch.randn(8))
    assert all(p.graph.by_name()[o].shape == k.shape for k in p.kernels for o in k.outputs)


def test_no_kernel_waits_on_itself():
    """relu feeds a conv and also the add after it: fusing both into one kernel would be a cycle."""
    def fn(s, x):
        r = torch.relu(x)
        return r + F.conv2d(r, s.w, padding=1)

    p = kernels(fn, torch.randn(1, 4, 6, 6), w=torch.randn(4, 4, 3, 3))
    assert len(p.kernels) == 2
    order = {u: i for i, u in enumerate(p.steps)}
    relu_k, add_k = p.kernels
    assert order[relu_k.name] < order[add_k.name]


def test_multiple_outputs():
    p = kernels(lambda s, x: (torch.relu(x), torch.relu(x) * 3.0), torch.randn(10, 10))
    assert len(p.kernels) == 1 and len(p.kernels[0].outputs) == 2


def test_integer_ops_stay_in_pytorch():
    p = kernels(lambda s, x: (x * 3) % 5, torch.randint(0, 9, (8, 8)))
    assert not p.kernels


def test_linear_chain():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)

        def forward(self, x):
            return F.gelu(self.fc(x)) * 0.5

    from torchweld.capture import capture
    from torchweld.plan import plan
    from torchweld.simplify import simplify

    p = plan(simplify(capture(M(), [torch.randn(8, 16)])))
    assert len(p.kernels) == 1
    text = describe(p)
    assert "aten.mm.default" in text and "[library]" in text and "k0(" in text  # the bias joined k0


def _targets(p):
    return [n.target for n in p.graph.nodes if n.op == "aten"]


def test_conv_bias_joins_the_kernel_only_when_a_kernel_follows():
    x, w, b = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    fused = kernels(lambda s, x: torch.relu(F.conv2d(x, s.w, s.b)), x, w=w, b=b)
    conv = next(n for n in fused.graph.nodes if n.target == "aten.convolution.default")
    assert conv.args[2] is None and any("fold_library_bias" in line for line in fused.graph.log)
    alone = kernels(lambda s, x: F.conv2d(x, s.w, s.b), x, w=w, b=b)
    conv = next(n for n in alone.graph.nodes if n.target == "aten.convolution.default")
    assert conv.args[2] is not None and not alone.kernels


def test_linear_bias_joins_the_kernel_through_views():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)

        def forward(self, x):
            return torch.sigmoid(self.fc(x))

    from torchweld.capture import capture
    from torchweld.plan import plan
    from torchweld.simplify import simplify

    for shape in [(8, 16), (2, 5, 16)]:
        p = plan(simplify(capture(M(), [torch.randn(*shape)])))
        assert "aten.addmm.default" not in _targets(p) and "aten.mm.default" in _targets(p)
        assert len(p.kernels) == 1 and [p.graph.by_name()[m].op for m in p.kernels[0].nodes] == ["add", "sigmoid"]


# --- the decisions recorded on the Plan -------------------------------------------------------------

def _corpus_plan(name: str, **options):
    from pathlib import Path

    from torchweld.pipeline import Options, compile_problem
    from torchweld.problem import load_problem

    root = Path(__file__).resolve().parents[1] / "problems"
    return compile_problem(load_problem(root / name), Options(**options)).plan


DECISIONS = {  # module in torchweld/plan/ -> the decisions it makes
    "conv_layout": ["conv_layouts"], "conv_sites": ["conv_sites"], "gemm_sites": ["gemm_sites"],
    "gemm_pack": ["packed_weights"], "memory": ["written_into", "written_over", "elided_views"],
    "guard": ["guard", "graph_blockers"],
}


def test_each_decision_is_made_once(monkeypatch):
    import importlib

    calls = []
    for module, names in DECISIONS.items():
        m = importlib.import_module(f"torchweld.plan.{module}")
        for name in names:
            fn = getattr(m, name)
            monkeypatch.setattr(m, name, lambda *a, _fn=fn, _name=name: calls.append(_name) or _fn(*a))
    plan = _corpus_plan("conv/conv2d_3x3_bn_eval_relu.py")
    assert sorted(calls) == sorted(n for names in DECISIONS.values() for n in names)
    assert plan.conv_sites and plan.guard.params


def test_the_plan_follows_the_options():
    planned = _corpus_plan("conv/conv2d_3x3_bn_eval_relu.py")
    assert planned.conv_sites == {"v9_lib": None} and planned.layouts.keep == {"v9_lib"}
    assert not planned.written_over  # the kernel's `_cl` build reads tiles: it may not write over them
    flat = _corpus_plan("conv/conv2d_3x3_bn_eval_relu.py", layout_plan=False)
    assert flat.conv_sites == {} and not flat.layouts.keep and not any(flat.layouts.of(k) for k in flat.kernels)
    assert flat.written_over == {"v19": "v9_lib"}
    graphed = _corpus_plan("reduce/linear_center_rows.py", cuda_graph=True)
    assert graphed.cuda_graph and not graphed.graph_blockers
    assert not _corpus_plan("reduce/linear_center_rows.py").cuda_graph  # not asked for
    blocked = _corpus_plan("norm/conv2d_batchnorm_relu.py", cuda_graph=True)
    assert not blocked.cuda_graph and "it updates buffers in place" in blocked.graph_blockers[0]


def test_guard_names_what_the_kernels_were_built_for():
    depthwise = _corpus_plan("conv/conv2d_depthwise_5x5_stride2_hardswish.py")
    nodes = depthwise.graph.by_name()
    assert [nodes[p].target for p in depthwise.guard.shapes] == ["conv.weight"]
    assert set(depthwise.guard.shapes) <= set(depthwise.guard.params)
    assert _corpus_plan("conv/conv2d_3x3_bn_eval_relu.py").guard.modes == (("bn", False),)
    assert _corpus_plan("norm/instance_norm1d_tracked_relu.py").guard.modes == (("norm", True),)
