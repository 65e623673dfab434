"""cuBLASLt epilogues (lt_epilogue.py): which kernels after a GEMM may run as one
torch._addmm_activation call, what the file and explain say about it, and the emitted file on the
CPU emulator (where the GEMM-then-kernel path always runs) against eager."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from cuda_emu import GXX, emulated_model, write_problem
from helpers import kernels
from torchweld.cli import main
from torchweld.lt_epilogue import LtEpilogue, lt_decisions
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
    """The one Lt decision of fn(self, x) with self.w (n, k) and self.b (n,), or None (with a kernel of
    the file's own beside it, as a file whose every kernel could be an epilogue keeps one)."""
    x = x.to(dtype)
    p = kernels(_with_own_kernel(fn), x, w=torch.randn(n, x.shape[-1], dtype=dtype), b=torch.randn(n, dtype=dtype))
    decisions = lt_decisions(p)
    assert len(decisions) <= 1, decisions
    return next(iter(decisions.values()), None)


@pytest.mark.parametrize("fn,use_gelu", [
    (lambda s, x: torch.relu(_linear(s, x)), False),
    (lambda s, x: F.gelu(_linear(s, x), approximate="tanh"), True),
    (lambda s, x: torch.relu(torch.addmm(s.b, x, s.w.t())), False),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_bias_and_relu_or_tanh_gelu_take_it(fn, use_gelu, dtype):
    d = _decision(fn, torch.randn(32, 48), dtype)
    assert isinstance(d, LtEpilogue) and d.use_gelu is use_gelu and d.bias == "p1" and not d.views


def test_leading_dims_flattened_keep_their_views():
    d = _decision(lambda s, x: torch.relu(_linear(s, x)), torch.randn(4, 8, 48))
    assert isinstance(d, LtEpilogue) and len(d.views) == 1  # mm -> view back to (4, 8, 64) -> add, relu


@pytest.mark.parametrize("fn,x,why", [
    (lambda s, x: F.gelu(_linear(s, x)), torch.randn(32, 48), "exact (erf) GELU"),
    (lambda s, x: torch.relu(_linear(s, x)) * 2.0, torch.randn(32, 48), "not just a bias add"),
    (lambda s, x: torch.relu(x @ s.w.t()), torch.randn(32, 48), "not just a bias add"),  # no bias
    (lambda s, x: torch.sigmoid(_linear(s, x)), torch.randn(32, 48), "not just a bias add"),
    # fp32: the scaled bias is folded into the kernel (epilogue.fold_library_bias), a mul and an add
    (lambda s, x: torch.relu(torch.addmm(s.b, x, s.w.t(), beta=0.5)), torch.randn(32, 48), "not just a bias add"),
    (lambda s, x: (torch.relu(y := _linear(s, x)), y), torch.randn(32, 48), "read elsewhere"),
    (lambda s, x: torch.relu(_linear(s, x)), torch.randn(1, 48), "matrix dim of 1"),
])
def test_other_chains_do_not(fn, x, why):
    d = _decision(fn, x)
    assert isinstance(d, str) and why in d, d


def test_a_file_whose_every_kernel_could_be_an_epilogue_keeps_its_first():
    # NOTE: the judge flags a forward that launches no kernel of its own (a library-only ModelNew).
    x, w, b = torch.randn(32, 48), torch.randn(64, 48), torch.randn(64)
    alone = lt_decisions(kernels(lambda s, x: torch.relu(_linear(s, x)), x, w=w, b=b))
    assert list(alone) == ["k0"] and "a ModelNew runs one of its own" in alone["k0"]
    mlp = lt_decisions(compile_problem(load_problem(MATMUL / "mlp3d_gelu_tanh_relu.py")).plan)
    assert isinstance(mlp["k0"], str) and isinstance(mlp["k1"], LtEpilogue)


def test_scaled_addmm_in_half_precision_does_not():
    # fp16 keeps the addmm (no fold: the product would round before the bias), beta and all
    d = _decision(lambda s, x: torch.relu(torch.addmm(s.b, x, s.w.t(), beta=0.5)), torch.randn(32, 48), torch.float16)
    assert isinstance(d, str) and "beta or alpha" in d, d


def test_float64_does_not():
    d = _decision(lambda s, x: torch.relu(_linear(s, x)), torch.randn(32, 48), torch.float64)
    assert isinstance(d, str) and "float64" in d


def test_header_says_what_was_considered_and_why_not():
    src = compile_problem(load_problem(MATMUL / "mlp3d_gelu_tanh_relu.py")).source
    header = src.split('"""')[1]
    assert "`_tw_lt` times each one offered against the GEMM then its kernel, once per device" in header
    assert "k0: no cuBLASLt epilogue: every kernel of the file could be an epilogue" in header
    assert "k1: or torch._addmm_activation(p3, v11, v10, use_gelu=False)" in header and "RELU_BIAS" in header
    erf = compile_problem(load_problem(MATMUL / "mlp_gelu_two_linears.py")).source
    assert "k0: no cuBLASLt epilogue: exact (erf) GELU" in erf.split('"""')[1]
    assert "_tw_lt" not in erf.split('"""', 2)[2] and "_tw_time" not in erf  # nothing to time: no runtime for it


def test_forward_times_both_ways_under_the_files_tf32_flags():
    src = compile_problem(load_problem(MATMUL / "mlp3d_gelu_tanh_relu.py"), Options(precision="tf32")).source
    assert "cuBLAS (cuBLASLt too) and cuDNN may use TF32" in src
    fwd = src[src.index("    def forward("):src.index("    def _tw_general(")]
    assert fwd.index("_tw_tf32((True, True))") < fwd.index("_tw_lt(self, 'k1', _lt_k1, v11, v10, p3)") < fwd.index(
        "finally:")
    assert "_k1(" not in fwd.replace("_lt_k1", "")  # both ways live in `_lt_k1`
    lt_fn = src[src.index("def _lt_k1(lt, v11, v10, p3):"):src.index("class ModelNew")]
    assert "torch._addmm_activation(p3, v11, v10, use_gelu=False)" in lt_fn and "return _k1(v13_lib, p3)[0]" in lt_fn
    assert "def _tw_time(" in src and "_tw_lt_pick" in src


def test_explain_shows_the_decision(capsys):
    assert main(["explain", str(MATMUL / "mlp3d_gelu_tanh_relu.py")]) == 0
    out = capsys.readouterr().out
    assert "# or torch._addmm_activation(p3, v11, v10, use_gelu=False): bias and ReLU in cuBLASLt's " \
           "RELU_BIAS epilogue" in out
    assert "# no cuBLASLt epilogue: every kernel of the file could be an epilogue" in out


@pytest.mark.parametrize("stem", ["linear_relu", "mlp3d_gelu_tanh_relu"])
def test_judge_static_scan_finds_nothing(stem):
    from torchweld.judge.static import scan

    path = MATMUL / f"{stem}.py"
    assert not scan(compile_problem(load_problem(path)).source, path.read_text())


EMU_MODEL = '''"""Emulator test model: {what}."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(48, 96)
        self.down = nn.Linear(96, 40)

    def forward(self, x):
        return torch.relu(self.down(F.gelu(self.up(x), approximate="tanh")))


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
'''


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("shape", ["24, 48", "3, 8, 48"])
def test_emulated_file_matches_eager_and_never_takes_the_epilogue_off_cuda(shape, tmp_path):
    """On the CPU `_tw_lt` keeps the GEMM and our kernels (there the epilogue's GELU would be exact,
    not tanh); forcing the epilogue for ReLU alone (the same on the CPU) runs its branch, views and all."""
    path = write_problem(tmp_path, f"mlp{len(shape)}", EMU_MODEL.format(what="tanh GELU MLP", shape=shape))
    new_cls, result = emulated_model(path, tmp_path)
    assert set(lt_decisions(result.plan)) == {"k0", "k1"}
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    new._tw_general = None  # NOTE: the fast path must run: a fallback to the original forward would fail here
    x = torch.randn(*map(int, shape.split(",")))
    with torch.no_grad():
        want = ref(x)
        assert torch.allclose(new(x), want, atol=1e-4, rtol=1e-4)
        assert new._tw_lt_plans == {("k1", -1): (False, [])}  # k0 stays ours: the file's own kernel
        new._tw_lt_plans[("k1", -1)] = (True, [])
        assert torch.allclose(new(x), want, atol=1e-4, rtol=1e-4)
