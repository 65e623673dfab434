"""Row kernels: a reduction and the pointwise ops that read its result broadcast back over its rows
plan as one kernel (rows.py), chains of reductions of the same rows too; what stays apart, and
the emitted source (one pass per reduction over registers, then the write). No GPU needed."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import graphs, kernels
from torchweld.codegen import module_source
from torchweld.codegen.registry import generator
from torchweld.interp import run_graph
from torchweld.ir import LIBRARY
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]


def _shape(p):
    """[(kind, anchors, members)] of each kernel."""
    nodes = p.graph.by_name()
    return [(k.kind, [nodes[m].op for m in k.nodes if nodes[m].is_anchor], len(k.nodes)) for k in p.kernels]


def _gen(result, i=0):
    k = result.plan.kernels[i]
    return generator(k, result.plan.graph.by_name())


@pytest.mark.parametrize("name,library,anchors,cache", [
    ("linear_center_rows", "aten.mm.default", ["mean"], ["v4"]),
    ("rmsnorm_by_hand", None, ["mean"], ["x0"]),
    ("l2_normalize_rows", None, ["vector_norm"], ["x0"]),
    ("linear_minus_logsumexp", "aten.mm.default", ["logsumexp"], ["v4"]),
    ("sum_normalize_rows", None, ["sum"], ["v2"]),
    ("manual_softmax_rows_fp16", None, ["amax", "sum"], ["v1"]),
    ("rmsnorm_weight_bf16", None, ["mean"], ["v2"]),
    ("conv2d_layernorm2d_by_hand", "aten.convolution.default", ["mean", "mean"], ["v5"]),
])
def test_corpus_row_problems_are_one_kernel(name, library, anchors, cache):
    """After the library call (if any), one reduce kernel: each row read once (kept in registers)."""
    result = compile_problem(load_problem(ROOT / "problems" / "reduce" / f"{name}.py"))
    p = result.plan
    assert [(kind, a) for kind, a, _ in _shape(p)] == [("reduce", anchors)]
    nodes = p.graph.by_name()
    lib = [s for s in p.steps if s in nodes and nodes[s].target in LIBRARY]
    assert [nodes[s].target for s in lib] == ([library] if library else [])
    assert not lib or p.steps.index(lib[0]) < p.steps.index("k0")
    g = _gen(result)
    assert g.rows and g.L.split == 1 and g.L.cache and g.cache == cache, (g.cache, g.L)
    assert "one read (kept in registers), one write" in result.source


def _one(fn, *inputs, **params):
    p = kernels(fn, *inputs, **params)
    return _shape(p)


PATTERNS = [
    (lambda s, x: x / x.sum(-1, keepdim=True), ["sum"]),
    (lambda s, x: x - x.amax(-1, keepdim=True), ["amax"]),
    (lambda s, x: x - torch.logsumexp(x, -1, keepdim=True), ["logsumexp"]),
    (lambda s, x: x / x.abs().amax(-1, keepdim=True).clamp(min=1e-6), ["amax"]),
    (lambda s, x: x - x.mean(0), ["mean"]),  # a leading reduced dim broadcasts without keepdim
    (lambda s, x: x / x.sum(-1)[:, None], ["sum"]),  # the view puts the dim back: keepdim
    (lambda s, x: x - x.mean(-1).unsqueeze(-1), ["mean"]),
    (lambda s, x: (e := torch.exp(x - x.amax(-1, keepdim=True))) / e.sum(-1, keepdim=True), ["amax", "sum"]),
    (lambda s, x: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True), ["mean", "std"]),
    (lambda s, x: (c := x - x.mean(-1, keepdim=True)) * torch.rsqrt((c * c).mean(-1, keepdim=True) + 1e-5),
     ["mean", "mean"]),
    (lambda s, x: (x - (vm := torch.var_mean(x, -1, keepdim=True))[1]) * torch.rsqrt(vm[0] + 1e-5), ["var"]),
]


@pytest.mark.parametrize("fn,anchors", PATTERNS)
def test_patterns_are_one_kernel(fn, anchors):
    assert [(kind, a) for kind, a, _ in _one(fn, torch.randn(48, 40))] == [("reduce", anchors)]


def test_middle_dim_rows():
    """Centring a conv-like output over its channels: rows along a strided dim, one kernel."""
    p = kernels(lambda s, x: torch.relu(x - x.mean(1, keepdim=True)) * s.w, torch.randn(2, 16, 5, 7),
                w=torch.randn(16, 1, 1))
    assert [(kind, a) for kind, a, _ in _shape(p)] == [("reduce", ["mean"])]


def test_reduced_value_also_an_output_is_written():
    """The sum is returned too: the row kernel stores it (once per row) beside the written rows."""
    p = kernels(lambda s, x: ((t := x.sum(-1, keepdim=True)) + 1.0, x / t), torch.randn(16, 40))
    (k,) = p.kernels
    nodes = p.graph.by_name()
    assert sorted(nodes[o].shape for o in k.outputs) == [(16, 1), (16, 40)]


def test_what_stays_apart():
    """A reduction over dims that do not broadcast back (sum over dim 1 read along dim 0), a result
    read at another shape, and a chain over rows too long for one block (each row split): not one kernel."""
    square = torch.randn(40, 40)
    assert len(_one(lambda s, x: x - x.sum(1), square)) == 2  # (40,) broadcasts along rows, not columns
    assert len(_one(lambda s, x: x[:, :20] - x.amax(-1, keepdim=True), square)) == 2  # half a row
    chain = _one(lambda s, x: (e := torch.exp(x - x.amax(-1, keepdim=True))) / e.sum(-1, keepdim=True),
                 torch.randn(4, 40000))
    assert [a for _, a, _ in chain] == [["amax"], ["sum"]]  # two row kernels, each split over blocks


def test_prologue_read_elsewhere_is_not_recomputed():
    """A prologue value that is also returned stays written by its own kernel (as before)."""
    shapes = _one(lambda s, x: ((y := x * 2.0) - y.mean(-1, keepdim=True), y), torch.randn(16, 40))
    assert ("pointwise", [], 1) in shapes


@pytest.mark.parametrize("fn", [
    lambda x: x - x.mean(-1).unsqueeze(-1),
    lambda x: x / x.norm(dim=-1).view(-1, 1),
    lambda x: x - x.amax(-1)[:, None],
])
def test_keepdim_view_rewrite_matches_eager(fn):
    x = torch.randn(8, 11)
    x[0, 3], x[1] = float("nan"), float("-inf")
    g, s = graphs(lambda self, v: fn(v), x)
    assert not any(n.op == "aten" for n in s.nodes) and any("keepdim=True" in line for line in s.log)
    assert torch.allclose(run_graph(s, {}, [x.clone()]), fn(x.clone()), equal_nan=True)


def test_emitted_chain_source():
    """Manual softmax: two passes over registers (max, then sum of exp), then the write."""
    result = compile_problem(load_problem(ROOT / "problems" / "reduce" / "manual_softmax_rows_fp16.py"))
    cu = module_source(list(result.plan.kernels), result.plan.graph)
    assert "acc = tw_block_reduce<1, 256, 4, 64, true>(acc);" in cu  # the max
    assert "acc = tw_block_reduce<0, 256, 4, 64, true>(acc);" in cu  # the sum of exp
    assert "float c_v1[PER * V];" in cu and "c_v1[j * V + e] = v1;" in cu
    assert cu.count("const float v1 = c_v1[j * V + e];") == 2  # the second pass and the write
    assert cu.count("const float v4 = expf(v3);") == 2 and "w_v6.v[e] = tw_st<__half>(v6);" in cu
    assert "#include <torch" not in cu


def test_layout_grows_a_row_for_two_cached_values():
    """fp16 rows of 4096 with two values cached: twice the threads a row, so both fit in registers."""
    from torchweld.tiling import layout

    one, two = layout(64, 4096, 1, 8, True, 1), layout(64, 4096, 1, 8, True, 2)
    assert one.cache and two.cache and two.ty == 2 * one.ty
    assert not layout(64, 4096 * 8, 1, 8, True, 2).cache


def test_interpreter_row_patterns_match_eager():
    """The simplified graphs of the row patterns compute what eager does (NaN/inf rows included)."""
    x = torch.randn(8, 11)
    x[0], x[1, 3], x[2, 5], x[3, ::2] = float("-inf"), float("inf"), float("nan"), float("-inf")
    for fn in (lambda v: v - torch.logsumexp(v, -1, keepdim=True), lambda v: F.normalize(v, dim=-1)):
        g, s = graphs(lambda self, v: fn(v), x)
        assert torch.allclose(run_graph(s, {}, [x.clone()]), fn(x.clone()), equal_nan=True)


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_row_kernels_compile_for_sm90(tmp_path):
    """Every row pattern above, in rows, a middle dim, split rows and fp16, builds with nvcc."""
    from helpers import nvcc_errors

    middle = [lambda s, x: (e := torch.exp(x - x.amax(1, keepdim=True))) / e.sum(1, keepdim=True),
              lambda s, x: (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True),
              lambda s, x: x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6)]
    cases = [(f, (48, 40), torch.float32) for f, _ in PATTERNS] + [(f, (4, 40000), torch.float32) for f, _ in PATTERNS]
    cases += [(f, (16, 512), torch.float16) for f, _ in PATTERNS] + [(f, (6, 24, 10), torch.float32) for f in middle]
    sources = {}
    for i, (fn, shape, dtype) in enumerate(cases):
        p = kernels(fn, torch.randn(shape).to(dtype))
        sources[i] = module_source(list(p.kernels), p.graph)
    errors = nvcc_errors(sources, tmp_path / "rows.cu")
    assert not errors, errors
