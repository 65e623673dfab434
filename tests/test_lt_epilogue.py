"""GEMM sites (plan/gemm_sites.py): which kernels after a GEMM may run another way than ours (torch.addmm
then the kernel given -0.0 for the bias, or one torch._addmm_activation call), what the file and
explain say about it, and the emitted file on the CPU emulator (where ours always runs unless forced)
against eager, each way forced."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from emulator import GXX, emulated_model, reference_and_new, write_problem
from helpers import kernels
from torchweld.cli import main
from torchweld.plan.gemm_sites import GemmSite
from torchweld.pipeline import Options, compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "problems" / "matmul"


def _linear(s, x):
    return F.linear(x, s.w, s.b)


def _with_own_kernel(fn):
    """fn(self, x) and exp(x) beside it: a kernel that stays ours whatever the GEMM's kernel does."""
    def both(s, x):
        out = fn(s, x)
        return (*out, torch.exp(x)) if isinstance(out, tuple) else (out, torch.exp(x))
    return both


def _decision(fn, x, dtype=torch.float32, n=64):
    """The one site decision of fn(self, x) with self.w (n, k) and self.b (n,), or None (with a kernel of
    the file's own beside it, as a file whose every kernel could be an epilogue keeps one)."""
    x = x.to(dtype)
    p = kernels(_with_own_kernel(fn), x, w=torch.randn(n, x.shape[-1], dtype=dtype), b=torch.randn(n, dtype=dtype))
    decisions = p.gemm_sites
    assert len(decisions) <= 1, decisions
    return next(iter(decisions.values()), None)


@pytest.mark.parametrize("fn,use_gelu", [
    (lambda s, x: torch.relu(_linear(s, x)), False),
    (lambda s, x: F.gelu(_linear(s, x), approximate="tanh"), True),
    (lambda s, x: torch.relu(torch.addmm(s.b, x, s.w.t())), False),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_bias_and_relu_or_tanh_gelu_take_the_epilogue(fn, use_gelu, dtype):
    d = _decision(fn, torch.randn(32, 48), dtype)
    assert isinstance(d, GemmSite) and d.use_gelu is use_gelu and d.bias == "p1" and not d.views
    # fp32: the bias was moved out of the GEMM, so addmm is offered too; fp16/bf16 keep addmm as captured
    assert d.ways == (("ours", "addmm", "epilogue") if dtype == torch.float32 else ("ours", "epilogue"))


def test_leading_dims_flattened_keep_their_views():
    d = _decision(lambda s, x: torch.relu(_linear(s, x)), torch.randn(4, 8, 48))
    assert isinstance(d, GemmSite) and len(d.views) == 1  # mm -> view back to (4, 8, 64) -> add, relu


@pytest.mark.parametrize("fn,x,dtype,why", [
    (lambda s, x: F.gelu(_linear(s, x)), torch.randn(32, 48), torch.float32, "exact (erf) GELU"),
    (lambda s, x: torch.relu(_linear(s, x)) * 2.0, torch.randn(32, 48), torch.float32, "not just a bias add"),
    (lambda s, x: torch.sigmoid(_linear(s, x)), torch.randn(32, 48), torch.float32, "not just a bias add"),
    (lambda s, x: torch.log_softmax(_linear(s, x), -1), torch.randn(32, 48), torch.float32, "not a pointwise kernel"),
    (lambda s, x: torch.relu(_linear(s, x)), torch.randn(1, 48), torch.float32, "matrix dim of 1"),
    (lambda s, x: torch.relu(_linear(s, x)), torch.randn(32, 48), torch.float64, "float64"),
])
def test_a_bias_added_to_an_mm_offers_addmm_alone(fn, x, dtype, why):
    """Whatever else the kernel does."""
    d = _decision(fn, x, dtype)
    assert isinstance(d, GemmSite) and d.ways == ("ours", "addmm") and why in d.no_epilogue, d
    assert d.bias == "p1"


@pytest.mark.parametrize("fn,x,dtype,why", [
    (lambda s, x: torch.relu(x @ s.w.t()), torch.randn(32, 48), torch.float32, "not just a bias add"),  # no bias
    (lambda s, x: torch.relu(torch.addmm(s.b, x, s.w.t(), beta=0.5)), torch.randn(32, 48), torch.float32,
     "not just a bias add"),  # the bias is scaled in the kernel: no add of it alone
    (lambda s, x: _linear(s, x) * s.b, torch.randn(32, 48), torch.float32, "not just a bias add"),  # bias read twice
    (lambda s, x: (torch.relu(y := _linear(s, x)), y), torch.randn(32, 48), torch.float32, "read elsewhere"),
    (lambda s, x: F.gelu(_linear(s, x)), torch.randn(32, 48), torch.bfloat16, "exact (erf) GELU"),  # addmm kept
    (lambda s, x: F.gelu(x @ s.w.t() + s.b), torch.randn(32, 48), torch.bfloat16, "exact (erf) GELU"),  # 2 roundings
])
def test_other_chains_have_only_ours(fn, x, dtype, why):
    d = _decision(fn, x, dtype)
    assert isinstance(d, str) and why in d, d


def test_a_kernel_updating_running_statistics_is_not_timed():
    """Timing runs each way a dozen times: a training-mode batch norm would update its statistics as often."""
    plan = compile_problem(load_problem(ROOT / "problems" / "norm" / "linear_batchnorm1d_train_tanh.py")).plan
    assert any(plan.graph.by_name()[m].op == "batch_norm" for k in plan.kernels for m in k.nodes)
    assert not plan.timed_gemm_sites


def test_a_file_whose_every_kernel_could_be_an_epilogue_keeps_its_first():
    # NOTE: the judge flags a forward that launches no kernel of its own (a library-only ModelNew);
    # addmm still runs our kernel.
    x, w, b = torch.randn(32, 48), torch.randn(64, 48), torch.randn(64)
    alone = kernels(lambda s, x: torch.relu(_linear(s, x)), x, w=w, b=b).gemm_sites
    assert list(alone) == ["k0"] and alone["k0"].ways == ("ours", "addmm")
    assert "a ModelNew runs one of its own" in alone["k0"].no_epilogue
    half = kernels(lambda s, x: torch.relu(_linear(s, x)), x.half(), w=w.half(), b=b.half()).gemm_sites
    assert "a ModelNew runs one of its own" in half["k0"]  # fp16: addmm as captured, no other way
    mlp = compile_problem(load_problem(MATMUL / "mlp3d_gelu_tanh_relu.py")).plan.gemm_sites
    assert mlp["k0"].ways == ("ours", "addmm") and mlp["k1"].ways == ("ours", "addmm", "epilogue")


def test_header_says_which_ways_each_site_has():
    src = compile_problem(load_problem(MATMUL / "mlp3d_gelu_tanh_relu.py")).source
    header = src.split('"""')[1]
    assert "GEMM sites (`_tw_lt` times each way offered besides ours" in header
    assert "k0: ways ours, addmm; addmm: torch.addmm(p1, v6, v5) then k0 given -0.0 for p1" in header
    assert "no cuBLASLt epilogue: every kernel of the file could be an epilogue" in header
    assert "k1: ways ours, addmm, epilogue; addmm: torch.addmm(p3, v11, v10) then k1 given -0.0 for p3" in header
    assert "epilogue: torch._addmm_activation(p3, v11, v10, use_gelu=False): bias and ReLU in cuBLASLt's " \
           "RELU_BIAS epilogue" in header
    erf = compile_problem(load_problem(MATMUL / "mlp_gelu_two_linears.py")).source
    assert "k0: ways ours, addmm; addmm: torch.addmm(" in erf and "no cuBLASLt epilogue: exact (erf) GELU" in erf
    bf16 = compile_problem(load_problem(ROOT / "problems" / "lowp" / "linear_gelu_tanh_bf16.py")).source
    assert "k0: no cuBLASLt epilogue: every kernel of the file" in bf16.split('"""')[1]
    assert "_tw_lt" not in bf16.split('"""', 2)[2] and "_tw_time" not in bf16  # nothing to time: no runtime for it


def test_forward_times_every_way_under_the_files_tf32_flags():
    src = compile_problem(load_problem(MATMUL / "mlp3d_gelu_tanh_relu.py"), Options(precision="tf32")).source
    assert "cuBLAS (cuBLASLt too) and cuDNN may use TF32" in src
    fwd = src[src.index("    def forward("):src.index("    def _tw_general(")]
    # NOTE: x too: the view back to (B, S, D) inside reads the sequence length from it
    call = "v14, = _tw_lt(self, 'k1', _lt_k1, ('ours', 'addmm', 'epilogue'), v11, v10, p3, x)"
    assert fwd.index("_tw_tf32((True, True))") < fwd.index(call) < fwd.index("finally:")
    assert "_k1(" not in fwd.replace("_lt_k1", "") and "torch.mm" not in fwd  # every way lives in `_lt_k1`
    lt_fn = src[src.index("def _lt_k1(module, way, v11, v10, p3, x):"):src.index("class ModelNew")]
    assert "torch._addmm_activation(p3, v11, v10, use_gelu=False)" in lt_fn
    assert "torch.addmm(p3, v11, v10)" in lt_fn and "return _k1(v13_lib, _tw_zero(module, 'k1', p3))" in lt_fn
    assert "torch.mm(v11, v10)" in lt_fn and "return _k1(v13_lib, p3)" in lt_fn
    assert "def _tw_time(" in src and "_tw_lt_pick" in src


def test_explain_shows_the_ways(capsys):
    assert main(["explain", str(MATMUL / "mlp3d_gelu_tanh_relu.py")]) == 0
    out = capsys.readouterr().out
    assert "  k1: ways ours, addmm, epilogue; addmm: torch.addmm(p3, v11, v10) then k1 given -0.0 for p3" in out
    assert "no cuBLASLt epilogue: every kernel of the file could be an epilogue" in out
    assert main(["explain", str(ROOT / "problems" / "reduce" / "linear_log_softmax.py")]) == 0
    out = capsys.readouterr().out
    assert "  k0: ways ours, addmm; addmm: torch.addmm(p1, x0, v3) then k0 given -0.0 for p1" in out
    assert "no cuBLASLt epilogue: not a pointwise kernel" in out


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("path", [MATMUL / "linear_relu.py", MATMUL / "mlp3d_gelu_tanh_relu.py",
                                  MATMUL / "mlp_gelu_two_linears.py", ROOT / "problems" / "reduce" / "linear_log_softmax.py"],
                         ids=lambda p: p.stem)
def test_judge_static_scan_finds_nothing(path, precision):
    from torchweld.judge.static import scan

    src = compile_problem(load_problem(path), Options(precision=precision)).source
    assert "_tw_lt(" in src
    assert not scan(src, path.read_text())


EMU_MODEL = '''"""Emulator test model: {what}."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(48, 96)
        self.down = nn.Linear(96, 40)
        self.scale = nn.Parameter(torch.rand(40) + 0.5)

    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
'''
MLP = 'torch.relu(self.down(F.gelu(self.up(x), approximate="tanh")))'
LOG_SOFTMAX = "torch.log_softmax(self.down(torch.tanh(self.up(x))) * self.scale, dim=-1)"  # k1 reads scale too


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("body,ways", [
    (MLP, {"k0": ("ours", "addmm"), "k1": ("ours", "addmm", "epilogue")}),
    (LOG_SOFTMAX, {"k0": ("ours", "addmm"), "k1": ("ours", "addmm")}),  # k1: a row kernel
], ids=["tanh_gelu_mlp", "log_softmax"])
@pytest.mark.parametrize("shape", ["24, 48", "3, 8, 48"])
def test_emulated_file_matches_eager_each_way_forced(body, ways, shape, tmp_path):
    """On the CPU `_tw_lt` keeps ours (there the epilogue's GELU would be exact, not tanh); forcing
    addmm (given -0.0 for the bias) or the epilogue for ReLU alone (the same on the CPU) runs its
    branch, views and all. The -0.0 vector is made once per site and is no part of the state dict."""
    path = write_problem(tmp_path, f"m{len(shape)}", EMU_MODEL.format(what="two linears", body=body, shape=shape))
    new_cls, result = emulated_model(path, tmp_path)
    assert {k: d.ways for k, d in result.plan.timed_gemm_sites.items()} == ways
    ref, new = reference_and_new(path, new_cls)
    new._tw_general = None  # NOTE: the fast path must run: a fallback to the original forward would fail here
    lib = type(new).forward.__globals__["_LIB"]
    x = torch.randn(*map(int, shape.split(",")))
    with torch.no_grad():
        want = ref(x)
        assert torch.allclose(new(x), want, atol=1e-4, rtol=1e-4)
        rows = 24  # NOTE: each GEMM's first matrix here has 24 rows: (site, device, size class) keys a pick
        assert new._tw_lt_plans == {(k, -1, rows.bit_length()): ("ours", {}) for k in ways}
        assert "_tw_lt_zeros" not in new.__dict__
        for way in ("addmm", "epilogue"):
            new._tw_lt_plans = {(k, -1, rows.bit_length()): (way if way in w else "ours", {}) for k, w in ways.items()}
            lib.launched.clear()
            assert torch.allclose(new(x), want, atol=1e-4, rtol=1e-4), way
            assert lib.launched == [k for k, w in ways.items() if way != "epilogue" or way not in w], way
        zeros = new._tw_lt_zeros
        assert set(zeros) == {(k, -1, torch.float32) for k in ways}
        made = {key: id(z) for key, z in zeros.items()}
        new._tw_lt_plans = {(k, -1, rows.bit_length()): ("addmm", {}) for k in ways}
        new(x)
        assert {key: id(z) for key, z in new._tw_lt_zeros.items()} == made  # not made again
        assert all(bool((z == 0).all() and z.signbit().all()) for z in zeros.values())
    assert list(new.state_dict()) == list(ref.state_dict())


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_a_runtime_batch_and_length_pick_again_per_size_class(tmp_path):
    """The batch and sequence length are runtime sizes here: each site measures its ways again where a call's
    GEMM rows fall in another power-of-two class (a pick made at batch 1 would not fit the captured batch),
    and never again within one."""
    path = write_problem(tmp_path, "classes", EMU_MODEL.format(what="two linears", body=MLP, shape="3, 8, 48"))
    new_cls, result = emulated_model(path, tmp_path)
    assert result.plan.guard.seq == 8
    ref, new = reference_and_new(path, new_cls)
    new._tw_general = None  # NOTE: the fast path must run: a fallback to the original forward would fail here
    picks = []
    type(new).forward.__globals__["_tw_lt_pick"] = lambda module, fn, ways, args: picks.append(args[0].shape[0]) or ("ours", {})
    with torch.no_grad():
        for batch, seq in ((3, 8), (3, 8), (1, 1), (2, 10), (4, 5), (1, 2)):
            x = torch.randn(batch, seq, 48)
            assert torch.allclose(new(x), ref(x), atol=1e-4, rtol=1e-4), (batch, seq)
    # rows 24, 1, 20 (the class of 24: 16 to 31) and 2: a pick per site at 24, 1 and 2
    assert picks == [24, 24, 1, 1, 2, 2], picks
    assert {key[2] for key in new._tw_lt_plans} == {5, 1, 2}


def test_scaled_addmm_in_half_precision_has_only_ours():
    # fp16 keeps the addmm (no fold: the product would round before the bias), beta and all
    d = _decision(lambda s, x: torch.relu(torch.addmm(s.b, x, s.w.t(), beta=0.5)), torch.randn(32, 48), torch.float16)
    assert isinstance(d, str) and "beta or alpha" in d, d
