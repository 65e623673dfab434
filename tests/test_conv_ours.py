"""Our convolution in the plan (plan/conv_ours.py, Options.conv_ours): which convolutions become kernels
of kind "conv", the pointwise kernel folded in as the epilogue with per-channel and full operands,
codegen's check respected, nothing changed with the option off; the emitted file's functions; a file
with our GEMM too builds one prelude (nvcc)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import graphs
from torchweld.codegen import conv_kernel
from torchweld.options import Options
from torchweld.pipeline import compile_problem
from torchweld.plan import plan
from torchweld.plan.conv_ours import OursConv
from torchweld.plan.describe import decisions
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
F = torch.nn.functional


def _plan(fn, *inputs, check=conv_kernel.check, **params):
    return plan(graphs(fn, *inputs, **params)[1], Options(conv_ours=True), conv_check=check)


def test_conv_bias_residual_relu_folds_with_per_channel_and_full_operands():
    p = _plan(lambda s, x: torch.relu(F.conv2d(x, s.w, None, 1, 1) + s.b.view(-1, 1, 1) + x),
              torch.randn(2, 8, 6, 6), w=torch.randn(8, 8, 3, 3), b=torch.randn(8))
    (name, site), = p.conv_ours.items()
    assert isinstance(site, OursConv) and site.folded and site.kernel.kind == "conv" and site.kernel.anchor == name
    assert name not in p.steps and site.kernel.name in p.steps and p.kernel(site.folded) is None
    assert sorted(x.kind for x in site.epilogue) == ["chan", "full"]
    full = next(x for x in site.epilogue if x.kind == "full")
    assert full.strides == (288, 36, 6, 1)
    assert "wgmma" in site.how and "16-byte gather" in site.how
    assert f"{name}: ours as {site.kernel.name}" in decisions(p)


def test_transposed_grouped_conv_site_and_its_own_bias():
    p = _plan(lambda s, x: F.conv_transpose1d(x, s.w, s.b, 2, 1, 1, 2, 1), torch.randn(2, 8, 9),
              w=torch.randn(8, 3, 4), b=torch.randn(6))
    site = next(iter(p.conv_ours.values()))
    assert site.transposed and site.groups == 2 and site.stride == (2,) and site.output_padding == (1,)
    assert site.bias is not None and not site.folded and "no fused kernel" in site.no_fold
    assert "acc + e_" in conv_kernel.spec(site, p.graph).epilogue


def test_a_result_read_elsewhere_is_not_folded():
    p = _plan(lambda s, x: (torch.relu(F.conv2d(x, s.w)), F.conv2d(x, s.w).sum()), torch.randn(1, 4, 5, 5),
              w=torch.randn(4, 4, 3, 3))
    sites = [s for s in p.conv_ours.values() if isinstance(s, OursConv)]
    assert sites and any(not s.folded for s in sites)


def test_codegen_check_keeps_the_library_call():
    p = _plan(lambda s, x: torch.relu(F.conv2d(x, s.w)), torch.randn(1, 4, 5, 5), w=torch.randn(4, 4, 3, 3),
              check=lambda site: ("no reason at all", ""))
    (name, why), = p.conv_ours.items()
    assert why == "no reason at all" and name in p.steps and all(k.kind != "conv" for k in p.kernels)


def test_option_off_changes_nothing():
    g = graphs(lambda s, x: torch.relu(F.conv2d(x, s.w)), torch.randn(1, 4, 5, 5), w=torch.randn(4, 4, 3, 3))[1]
    p = plan(g, Options())
    assert not p.conv_ours and all(k.kind != "conv" for k in p.kernels)


def test_emitted_file_selects_per_site():
    r = compile_problem(load_problem(ROOT / "problems" / "conv" / "conv2d_bn_eval_residual_relu.py"), Options(conv_ours=True))
    src = r.source
    assert "_tw_convk(self, 'ck0', _ck0_ours, _ck0_library" in src and "def _tw_conv_mismatch" in src
    assert "Convolutions with --conv-ours" in src and "tw_conv_path_ck0" in src and "twc_sm90<" in src
    compile(src, "emitted", "exec")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_file_with_our_gemm_and_convolution_compiles(tmp_path):
    """One prelude carries both kinds' wgmma wrappers (each specialisation once)."""
    path = tmp_path / "both.py"
    path.write_text('''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * 64, 64)

    def forward(self, x):
        return torch.relu(self.fc(torch.relu(self.conv(x)).flatten(1)))


def get_inputs():
    return [torch.randn(8, 16, 8, 8)]


def get_init_inputs():
    return []
''')
    r = compile_problem(load_problem(path), Options(conv_ours=True, gemm=True))
    assert {k.kind for k in r.plan.kernels} >= {"conv", "gemm"}
    cuda = re.search(r'_CUDA_SRC = r"""\n(.*?)"""', r.source, re.S).group(1)
    cu = tmp_path / "both.cu"
    cu.write_text(cuda)
    proc = subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O1", "-c", str(cu), "-o",
                           str(tmp_path / "both.o"), "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                           "-D__CUDA_NO_BFLOAT16_CONVERSIONS__"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


CORPUS = sorted(p for d in ("conv", "conv_transpose", "seeds") for p in (ROOT / "problems" / d).glob("*.py"))


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_every_corpus_convolution_is_ours(path):
    """With --conv-ours every convolution the library ran is our kernel (depthwise ones keep their own kind)."""
    r = compile_problem(load_problem(path), Options(conv_ours=True))
    assert [s for s in r.plan.conv_ours.values() if isinstance(s, str)] == []
    assert all(n.target != "aten.convolution.default" for n in r.plan.graph.nodes if n.name in r.plan.steps)
