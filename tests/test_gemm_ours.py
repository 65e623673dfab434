"""Our GEMM in the plan (plan/gemm_ours.py, Options.gemm): which corpus GEMMs become kernels of kind
"gemm", the pointwise kernel folded in as the epilogue, operands read through their strides, codegen's
check respected, and nothing changed with the option off; the spec and source codegen makes of them."""
from __future__ import annotations

from pathlib import Path

import pytest

from torchweld.capture import capture
from torchweld.codegen import gemm_kernel
from torchweld.options import Options
from torchweld.plan import plan
from torchweld.plan.describe import decisions
from torchweld.plan.gemm_ours import OursGemm
from torchweld.problem import load_problem
from torchweld.simplify import simplify

MATMUL = Path(__file__).resolve().parents[1] / "problems" / "matmul"


def _graph(name: str):
    pr = load_problem(MATMUL / f"{name}.py")
    return simplify(capture(pr.build_model(0), pr.inputs(), filename=str(pr.path)))


def _ours(name: str, check=gemm_kernel.check, **options):
    g = _graph(name)
    return g, plan(g, Options(gemm=True, **options), check)


@pytest.mark.parametrize("name, gemm, kernel, folded", [
    ("linear_relu", "v4_lib", "gk0", "k0"),
    ("addmm_alpha_beta_gelu", "v3_lib", "gk0", "k0"),
    ("bmm_transposed_relu_scale", "v3", "gk0", "k0"),
    ("baddbmm_bias_sigmoid", "v3_lib", "gk0", "k0"),
    ("linear3d_swish_residual", "v5", "gk0", "k0"),
    ("einsum_bmm_relu_scale", "v10", "gv10", ""),  # no fused kernel reads it: ours alone
])
def test_corpus_gemms_become_gemm_kernels(name, gemm, kernel, folded):
    g, p = _ours(name)
    site = p.gemm_ours[gemm]
    assert isinstance(site, OursGemm) and site.kernel.name == kernel and site.folded == folded
    k = p.kernel(kernel)
    assert k is not None and k.kind == "gemm" and k.anchor == gemm and kernel in p.steps
    assert gemm not in p.steps and (not folded or p.kernel(folded) is None)
    assert site.how and "mma.sync" in site.how  # codegen's tile description
    assert f"{gemm}: ours as {kernel}" in decisions(p)


def test_operands_read_through_their_strides():
    """W.t() of a linear and a transposed bmm operand: strides, no copy, and no packed weight."""
    _, p = _ours("linear_relu")
    site = p.gemm_ours["v4_lib"]
    assert site.b.strides == (0, 1, 1024) and site.a.strides == (0, 1024, 1)
    assert [x.strides for x in site.epilogue] == [(0, 0, 1)]  # the bias, per column
    assert not p.packed_weights
    _, p = _ours("bmm_transposed_relu_scale")
    assert p.gemm_ours["v3"].b.strides == (49152, 1, 128) and p.gemm_ours["v3"].batch == 32


def test_a_kernel_reading_two_gemms_folds_into_the_first_alone():
    _, p = _ours("linear_gated_residual")
    first, second = p.gemm_ours["v7"], p.gemm_ours["v12"]
    assert first.folded == "k0" and second.folded == "" and "folded into another GEMM" in second.no_fold
    assert [k.name for k in p.kernels if k.kind == "gemm"] == ["gv12", "gk0"]
    assert p.steps.index("gv12") < p.steps.index("gk0")


def test_unfoldable_epilogues_say_why():
    _, p = _ours("matmul4d_scale_additive_mask")  # a mask broadcast over heads only
    assert "one stride cannot walk" in p.gemm_ours["v8"].no_fold
    _, p = _ours("bmm_scale_causal_masked_fill")
    assert "bool" in p.gemm_ours["v4"].no_fold


def test_unsupported_keeps_the_library_call():
    g, p = _ours("linear_relu", check=lambda site: ("more than 65535 batches", ""))
    assert p.gemm_ours == {"v4_lib": "more than 65535 batches"}
    plain = plan(g)
    assert (p.kernels, p.steps, p.packed_weights) == (plain.kernels, plain.steps, plain.packed_weights)
    assert "v4_lib: library: more than 65535 batches" in decisions(p)


def test_option_off_changes_nothing():
    g = _graph("linear_relu")
    assert plan(g, Options(), gemm_kernel.check) == plan(g)
    assert not plan(g).gemm_ours and "Our GEMM" not in decisions(plan(g))


def test_tf32_asks_1xtf32():
    _, p = _ours("linear_relu", precision="tf32")
    assert p.gemm_ours["v4_lib"].precision == "1xtf32" and p.gemm_ours["v4_lib"].how.startswith("1xtf32")


def test_spec_carries_the_folded_epilogue():
    g, p = _ours("addmm_alpha_beta_gelu")
    s = gemm_kernel.spec(p.gemm_ours["v3_lib"], g)
    assert (s.m, s.n, s.k, s.batch) == (512, 4096, 1024, 1)
    assert [(x.name, x.kind) for x in s.inputs] == [("e_p1", "col")]
    assert "const float v3_lib = acc;" in s.epilogue and "tanhf" in s.epilogue and "return (float)v4;" in s.epilogue


@pytest.mark.parametrize("name", ["linear_gated_residual", "../reduce/linear_log_softmax"])
def test_no_library_way_for_a_gemm_ours_runs(name):
    """A kernel after a GEMM our kernel runs is not offered `_tw_lt`'s ways (which would make the GEMM again)."""
    _, p = _ours(name)
    ours = {k.anchor for k in p.kernels if k.kind == "gemm"}
    assert ours and not p.timed_gemm_sites
    assert plan(_graph(name)).timed_gemm_sites  # without --gemm it has one


def test_guard_checks_the_weights_read_through_a_transpose():
    _, p = _ours("linear3d_swish_residual")
    assert {"p0", "p1"} <= set(p.guard.params)  # p0: the weight, read as p0.t() by the GEMM


def test_operand_made_by_a_rewrite_reads_as_contiguous():
    """A hand-written LSTM cell's gate GEMM reads a value no capture recorded strides for (it raised
    'not enough values to unpack' in codegen): it is read as the contiguous tensor it is."""
    pr = load_problem(MATMUL.parent / "recurrent" / "lstm_cell_loop.py")
    g = simplify(capture(pr.build_model(0), pr.inputs(), filename=str(pr.path)))
    p = plan(g, Options(gemm=True), gemm_kernel.check)
    sites = [s for s in p.gemm_ours.values() if isinstance(s, OursGemm)]
    assert sites and all(len(s.a.strides) == 3 and len(s.b.strides) == 3 for s in sites)
