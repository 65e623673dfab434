"""Pooling: capture to pool anchors, kernel plans with prologue and epilogue, emitted source, and
the IR interpreter (the emitted file's general path) against eager PyTorch. No GPU needed."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import graphs, kernels
from torchweld.capture import capture
from torchweld.codegen import module_source
from torchweld.codegen.pool import Geometry, memory_order
from torchweld.emit import emit
from torchweld.interp import run_graph
from torchweld.ir import POOL
from torchweld.pipeline import compile_problem
from torchweld.plan import plan
from torchweld.problem import load_problem
from torchweld.simplify import simplify

ROOT = Path(__file__).resolve().parents[1]
CL = torch.channels_last


def _ops(g):
    return [n.op for n in g.nodes if n.op not in ("input", "param")]


def _kinds(p):
    nodes = p.graph.by_name()
    return [(k.kind, [nodes[m].op for m in k.nodes]) for k in p.kernels]


def _conv(s, x):
    return F.conv2d(x, s.w, s.b, padding=1)


# --- capture ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fn,op,attrs", [
    (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), "max_pool",
     {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": True}),
    (lambda x: F.max_pool2d(x, (2, 3), dilation=2), "max_pool", {"kernel": (2, 3), "stride": (2, 3), "dilation": (2, 2)}),
    (lambda x: F.avg_pool2d(x, 3, 2, 1, True, False), "avg_pool", {"ceil_mode": True, "count_include_pad": False}),
    (lambda x: F.avg_pool2d(x, 2, divisor_override=3), "avg_pool", {"divisor": 3, "count_include_pad": True}),
    (lambda x: F.adaptive_avg_pool2d(x, (5, 3)), "adaptive_avg_pool", {"out": (5, 3)}),
    (lambda x: F.adaptive_max_pool2d(x, 4), "adaptive_max_pool", {"out": (4, 4)}),
    (lambda x: F.max_pool3d(x.unsqueeze(1), 2), "max_pool", {"kernel": (2, 2, 2)}),
    (lambda x: F.avg_pool3d(x.unsqueeze(1), (1, 2, 2), padding=(0, 1, 0)), "avg_pool", {"padding": (0, 1, 0)}),
    (lambda x: F.adaptive_avg_pool3d(x.unsqueeze(1), (2, 3, 4)), "adaptive_avg_pool", {"out": (2, 3, 4)}),
])
def test_pools_capture_to_anchors(fn, op, attrs):
    g, s = graphs(lambda self, x: fn(x), torch.randn(2, 4, 13, 15))
    (node,) = [n for n in s.nodes if n.op in POOL]
    assert node.op == op and all(node.attr(k) == v for k, v in attrs.items()), node
    assert _ops(s) == ([op] if node.shape[1] == 4 else ["aten", op])  # the 3-d ones read an unsqueeze


def test_one_d_pools_read_the_unsqueezed_input():
    """ATen's unsqueeze -> 2-d pool -> squeeze becomes one 1-d pool; the dead indices go too."""
    fns = [lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: F.avg_pool1d(x, 4, ceil_mode=True),
           lambda x: F.adaptive_avg_pool1d(x, 5), lambda x: F.adaptive_max_pool1d(x, 4)]
    for fn in fns:
        g, s = graphs(lambda self, x: fn(x), torch.randn(2, 6, 33))
        assert _ops(s) == [_ops(s)[0]] and _ops(s)[0] in POOL, s
        node = s.nodes[-1]
        assert len(node.attr("out", node.attr("kernel"))) == 1 and node.args == ("x0",)
        assert node.shape == tuple(fn(torch.randn(2, 6, 33)).shape)


def test_max_pool_indices_used_stays_in_pytorch():
    g, s = graphs(lambda self, x: F.max_pool2d(x, 2, return_indices=True), torch.randn(2, 3, 8, 8))
    assert not any(n.op in POOL for n in s.nodes)
    assert any(n.target == "aten.max_pool2d_with_indices.default" for n in s.nodes)


def test_global_pools_become_reductions_over_contiguous_data():
    x = torch.randn(2, 8, 7, 9)
    for fn, op in [(lambda v: F.adaptive_max_pool2d(v, 1), "amax"), (lambda v: F.avg_pool2d(v, (7, 9)), "mean"),
                   (lambda v: F.max_pool2d(v, (7, 9)), "amax"), (lambda v: F.adaptive_avg_pool2d(v, 1), "mean"),
                   (lambda v: F.adaptive_max_pool1d(v.flatten(2), 1), "amax")]:
        g, s = graphs(lambda self, v: fn(v), x)
        (node,) = [n for n in s.nodes if n.is_anchor]
        assert node.op == op and node.attr("keepdim") is True, s
        assert node.shape == tuple(fn(x).shape)
    # channels-last: the pool kernel reads channels side by side; a row reduction would stride by C
    for fn, op in [(lambda v: F.adaptive_max_pool2d(v, 1), "adaptive_max_pool"),
                   (lambda v: v.mean((2, 3), keepdim=True), "adaptive_avg_pool"),
                   (lambda v: F.adaptive_avg_pool2d(v, 1), "adaptive_avg_pool"),
                   (lambda v: v.mean((2, 3)), "mean")]:  # without keepdim it stays a reduction
        g, s = graphs(lambda self, v: fn(v), x.contiguous(memory_format=CL))
        assert [n.op for n in s.nodes if n.is_anchor] == [op]
        y = x.contiguous(memory_format=CL)
        assert torch.allclose(run_graph(s, {}, [y]), fn(y), atol=1e-6)


def test_channels_last_global_pool_keeps_its_epilogue():
    """ATen restores channels-last strides on a global pool's (N, C, 1, 1) result with as_strided_,
    which moves no element: it is dropped, so the hardswish still joins the kernel."""
    x = torch.randn(2, 8, 17, 19).contiguous(memory_format=CL)
    fn = lambda v: F.hardswish(F.adaptive_avg_pool2d(v * 2.0, 1))  # noqa: E731
    g, s = graphs(lambda self, v: fn(v), x)
    assert not any(n.op == "aten" for n in s.nodes)
    assert _kinds(plan(s)) == [("reduce", ["mul", "mean", "hardswish"])]  # 16 outputs of 323: a row reduction
    assert torch.allclose(run_graph(s, {}, [x]), fn(x), atol=1e-6)


def test_avg_pool_with_padding_is_not_global():
    g, s = graphs(lambda self, v: F.avg_pool2d(v, 3, padding=1), torch.randn(2, 3, 3, 3))
    assert [n.op for n in s.nodes if n.is_anchor] == ["avg_pool"]


def test_integer_pooling_stays_in_pytorch():
    g, s = graphs(lambda self, v: F.max_pool2d(v.to(torch.int32), 2) + 1, torch.randn(2, 3, 8, 8))
    assert not any(n.op in POOL for n in s.nodes)


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), lambda x: F.avg_pool2d(x, 3, 2, 1, True, False),
    lambda x: F.avg_pool2d(x, 2, divisor_override=3), lambda x: F.adaptive_avg_pool2d(x, (5, 3)),
    lambda x: F.adaptive_max_pool2d(x, 4), lambda x: F.max_pool1d(x.flatten(2), 5, 3, 2, 2, True),
    lambda x: F.avg_pool1d(x.flatten(2), 4, 3, 2, True, False), lambda x: F.adaptive_max_pool1d(x.flatten(2), 7),
    lambda x: F.max_pool3d(x.unsqueeze(1), 2, 1, 1, 2), lambda x: F.adaptive_avg_pool3d(x.unsqueeze(1), (3, 4, 5)),
])
def test_interpreter_matches_eager(fn):
    """The IR's torch expression for each pool (the emitted file's general path) is eager's call."""
    x = torch.randn(2, 4, 13, 15)
    x[0, 0, 3, 4], x[1, 2, 5] = float("nan"), float("-inf")
    g, s = graphs(lambda self, v: torch.relu(fn(v)) * 2.0, x)
    assert any(n.op in POOL for n in s.nodes)
    got, want = run_graph(s, {}, [x]), torch.relu(fn(x)) * 2.0
    assert torch.allclose(got, want, equal_nan=True, atol=1e-6)


# --- plan --------------------------------------------------------------------------------------

def test_conv_relu_maxpool_hardswish_is_one_pool_kernel():
    """The conv stays in cuDNN; its bias and the relu are recomputed per read, hardswish on the result."""
    p = kernels(lambda s, x: F.hardswish(F.max_pool2d(torch.relu(_conv(s, x)), 3, 2, 1)),
                torch.randn(2, 3, 16, 16), w=torch.randn(8, 3, 3, 3), b=torch.randn(8))
    assert _kinds(p) == [("pool", ["add", "relu", "max_pool", "hardswish"])]
    k = p.kernels[0]
    assert k.shape == (2, 8, 16, 16) and p.graph.by_name()[k.outputs[0]].shape == (2, 8, 8, 8)


def test_epilogue_with_a_channel_bias():
    p = kernels(lambda s, x: torch.sigmoid(F.avg_pool2d(x, 2) + s.bias), torch.randn(2, 8, 10, 10),
                bias=torch.randn(8, 1, 1))
    assert _kinds(p) == [("pool", ["avg_pool", "add", "sigmoid"])]


def test_costly_prologue_over_overlapping_windows_is_written_once():
    """gelu under a 3x3 stride-1 pool would be computed 9 times per element: it gets its own kernel."""
    p = kernels(lambda s, x: F.max_pool2d(F.gelu(x), 3, 1, 1), torch.randn(2, 4, 16, 16))
    assert sorted(_kinds(p)) == [("pointwise", ["gelu"]), ("pool", ["max_pool"])]
    p = kernels(lambda s, x: F.max_pool2d(F.gelu(x), 2), torch.randn(2, 4, 16, 16))
    assert _kinds(p) == [("pool", ["gelu", "max_pool"])]


def test_prologue_value_needed_elsewhere_is_not_recomputed():
    p = kernels(lambda s, x: (F.max_pool2d(torch.relu(x), 2), torch.relu(x) * 2.0), torch.randn(2, 4, 8, 8))
    pools = [k for k in p.kernels if k.kind == "pool"]
    assert len(pools) == 1 and len(pools[0].nodes) == 1


def test_maxpool1d_over_a_sequence_fuses_its_prologue():
    p = kernels(lambda s, x: F.max_pool1d(torch.relu(x + s.bias), 3, 2), torch.randn(4, 16, 50),
                bias=torch.randn(16, 1))
    assert _kinds(p) == [("pool", ["add", "relu", "max_pool"])]


# --- codegen and emit ---------------------------------------------------------------------------

def test_memory_order_follows_strides():
    x = torch.randn(2, 8, 6, 7)
    assert memory_order(x.shape, x.stride()) == [0, 1, 2, 3]
    assert memory_order(x.shape, x.contiguous(memory_format=CL).stride()) == [0, 2, 3, 1]
    assert memory_order((2, 1, 6, 7), (42, 42, 7, 1)) == [0, 2, 3, 1]


def _compiled(fn, x, **params):
    from helpers import Fn

    g = simplify(capture(Fn(fn, **params), [x]))
    return plan(g)


def test_channels_last_pool_reads_channels_side_by_side():
    x = torch.randn(2, 16, 9, 9).contiguous(memory_format=CL)
    p = _compiled(lambda s, v: torch.relu(F.max_pool2d(v, 3, 2)), x)
    (k,) = p.kernels
    cu = module_source(list(p.kernels), p.graph)
    assert "const unsigned q_c1 = q_t % 16;" in cu  # channels fastest
    assert "in_x0[q_c0 * 1296 + (unsigned)(q_h2) * 144 + (unsigned)(q_h3) * 16 + q_c1]" not in cu
    assert "in_x0[q_c0 * 1296 + q_c1 + (unsigned)(q_h2) * 144 + (unsigned)(q_h3) * 16]" in cu
    assert "out_v2[q_t]" in cu
    src = emit(p, "class Model:\n    def forward(self, x):\n        return x\n", "cl")
    # NOTE: the batch is a runtime size (dim 0 outermost in either layout): the rest as captured
    assert "torch.empty_strided((a_x0.shape[0], *(16, 4, 4)), (256, 1, 64, 16)" in src
    assert "a_x0 = _tw_layout(a_x0, (a_x0.shape[0], *(16, 9, 9)), (1296, 1, 144, 16))" in src  # laid out as captured


def test_kernel_source_semantics():
    """ATen's tests, word for word: NaN-propagating max, -inf start, clipped divisors."""
    x = torch.randn(2, 3, 17, 19)
    cu = module_source(*_parts(_compiled(lambda s, v: F.max_pool2d(v, 3, 2, 1, ceil_mode=True), x)))
    assert "float q_acc = -INFINITY;" in cu and "q_acc = tw_max(x0, q_acc);" in cu
    assert "if ((q_h2 < 0) || (q_h2 >= 17)) continue;" in cu and "#pragma unroll" in cu
    cu = module_source(*_parts(_compiled(lambda s, v: F.avg_pool2d(v, 3, 2, 1, True, False), x)))
    assert "const int q_n2 = tw_min(q_b2 + 3, 17) - tw_max(q_b2, 0);" in cu
    assert "((q_n2 <= 0) || (q_n3 <= 0)) ? 0.0f : q_acc / (float)(q_n2 * q_n3)" in cu
    cu = module_source(*_parts(_compiled(lambda s, v: F.avg_pool2d(v, 3, 2, 1, True, True), x)))
    assert "q_acc / (float)(q_z2 * q_z3)" in cu and "const int q_z3 = tw_min(q_b3 + 3, 20) - q_b3;" in cu
    cu = module_source(*_parts(_compiled(lambda s, v: F.avg_pool2d(v, 2), x)))
    assert "q_acc / (float)(4)" in cu and "continue" not in cu  # every window inside: no tests
    cu = module_source(*_parts(_compiled(lambda s, v: F.adaptive_avg_pool2d(v, (5, 19)), x)))
    assert "const int q_s2 = (int)(((unsigned)(q_c2) * 17) / 5);" in cu
    assert "const int q_e2 = (int)(((unsigned)(q_c2) * 17 + 21) / 5);" in cu
    assert "q_acc / (float)(q_e2 - q_s2) / (float)(1)" in cu


def _parts(p):
    return list(p.kernels), p.graph


def test_invariant_operands_are_loaded_before_the_window():
    p = _compiled(lambda s, v: F.max_pool2d(v * s.scale + 1.0, 2), torch.randn(2, 8, 10, 10),
                  scale=torch.randn(8, 1, 1))
    cu = module_source(*_parts(p))
    head, loop = cu.split("float q_acc", 1)
    assert "const auto p0 = tw_ld(in_p0[q_c1]);" in head and "in_p0" not in loop.split("out_")[0]


def test_geometry_of_a_3d_pool():
    x = torch.randn(2, 3, 5, 6, 7)
    p = _compiled(lambda s, v: F.avg_pool3d(v, (3, 2, 3), (2, 2, 1), 1), x)
    nodes = p.graph.by_name()
    a = nodes[p.kernels[0].anchor]
    geo = Geometry(a, nodes[a.args[0]])
    assert [ax.dim for ax in geo.axes] == [2, 3, 4] and all(ax.checked for ax in geo.axes)
    assert geo.out_shape == tuple(F.avg_pool3d(x, (3, 2, 3), (2, 2, 1), 1).shape)


def test_emitted_pool_problem():
    result = compile_problem(load_problem(ROOT / "problems" / "pool" / "conv2d_relu_maxpool.py"))
    src = result.source
    assert "1 pools with their pointwise neighbours" in src
    assert "one thread per output" in src and "#include <torch" not in src
    assert [k.kind for k in result.plan.kernels] == ["pool"]
    assert "aten.max_pool2d" not in src.split("class ModelNew")[1].split("def _tw_general")[0]


# --- the GPU sweep, on the CPU: planned as one kernel per pool, and nvcc compiles it -----------

SWEEP_VARIANTS = [("float32", False), ("float32", True), ("float16", False), ("bfloat16", True)]


def _sweep_plan(tmp_path, dtype, channels_last):
    from pool_sweep import sweep_source

    path = tmp_path / f"sweep_{dtype}_{int(channels_last)}.py"
    path.write_text(sweep_source(dtype, channels_last))
    return compile_problem(load_problem(path))


def test_sweep_is_one_kernel_per_pool(tmp_path):
    from pool_sweep import SWEEP

    for dtype, cl in SWEEP_VARIANTS:
        result = _sweep_plan(tmp_path, dtype, cl)
        nodes = result.plan.graph.by_name()
        ks = result.plan.kernels
        aten = [nodes[s].target for s in result.plan.steps if nodes.get(s) and nodes[s].op == "aten"]
        assert len(ks) == len(SWEEP) and aten == ["aten.transpose.int"]  # a view, read in place
        # global pools are row reductions over contiguous data, pools over channels-last data unless
        # a few long windows would leave the GPU idle
        assert [k.kind for k in ks].count("reduce") == (1 if cl else 3)
        for i, k in enumerate(ks):  # prologues and epilogues as sweep_source cycles them
            ops = [nodes[m].op for m in k.nodes]
            extra = SWEEP[i].count(" - x")
            assert len(ops) == 1 + (0, 2, 2)[i % 3] + (0, 1, 3)[(i // 3) % 3] + extra, (i, ops)


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not installed")
def test_sweep_kernels_compile_for_sm90(tmp_path):
    from helpers import nvcc_errors

    sources = {}
    for dtype, cl in SWEEP_VARIANTS:
        result = _sweep_plan(tmp_path, dtype, cl)
        sources[(dtype, cl)] = module_source(list(result.plan.kernels), result.plan.graph)
    errors = nvcc_errors(sources, tmp_path / "sweep.cu")
    assert not errors, errors


POOL_PROBLEMS = sorted((ROOT / "problems" / "pool").glob("*.py"))


@pytest.mark.parametrize("problem", POOL_PROBLEMS, ids=lambda p: p.stem)
def test_pool_problem_files_load_on_the_cpu(problem, tmp_path):
    """Each emitted file imports without a GPU, keeps the original's parameters, and its pools run
    in kernels: no pooling call is left in the fast path of forward."""
    from torchweld.problem import load_module

    prob = load_problem(problem)
    result = compile_problem(prob)
    nodes = result.plan.graph.by_name()
    assert any(k.kind == "pool" or nodes[k.anchor].op == "mean" for k in result.plan.kernels if k.anchor)
    fast = result.source.split("    def forward(")[1].split("def _tw_general")[0]
    assert not [line for line in fast.splitlines() if "pool" in line.split("#")[0]]  # kernel calls name it in comments
    path = tmp_path / "new.py"
    path.write_text(result.source)
    module = load_module(path, path.read_text(), prefix="tw_pool_cpu")
    torch.manual_seed(3)
    ref = prob.model_cls(*prob.init_inputs())
    torch.manual_seed(3)
    new = module.ModelNew(*prob.init_inputs())
    assert [(k, v.shape) for k, v in ref.state_dict().items()] == [(k, v.shape) for k, v in new.state_dict().items()]
