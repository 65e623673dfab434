"""Our convolution kernel's generator: what it accepts, how it packs and plans, and its CUDA under
nvcc (sm_90a and sm_80 builds, no local memory). tests/test_conv_emu.py runs the kernels."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conv_harness import site
from torchweld.codegen.conv_spec import ConvInput, ConvSpec, plan, unsupported
from torchweld.codegen.conv_source import conv_source
from torchweld.runtime.conv_select import _tw_channels_last, _tw_conv_pack

NVCC = shutil.which("nvcc")
TORCH_NVCC = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]
ARCHS = {"sm90a": "-gencode=arch=compute_90a,code=sm_90a", "sm80": "-gencode=arch=compute_80,code=sm_80"}
# The main configurations nvcc compiles (ResNet-like layers, a 3-d transposed one, a long 1-d one, an NCHW stem).
NVCC_CASES = [
    site("r50_f32", 2, False, n=32, cin=64, cout=64, size=56, padding=1, bias=True, relu=True),
    site("r50_f32_wide", 2, False, n=32, cin=128, cout=128, size=28, padding=1, bn=True, relu=True, tile90=(128, 128)),
    site("r50_h16", 2, False, "float16", n=32, cin=128, cout=128, size=28, padding=1, residual=True, relu=True),
    site("r50_b16_wide", 2, False, "bfloat16", n=32, cin=256, cout=256, size=14, padding=1, bn=True, relu=True),
    site("r50_1x_wide", 2, False, n=32, cin=256, cout=256, size=14, padding=1, precision="1xtf32"),
    site("t3_b16", 3, True, "bfloat16", n=4, cin=32, cout=32, size=8, kernel=2, stride=2),
    site("t2_f32", 2, True, n=8, cin=64, cout=32, size=32, kernel=4, stride=2, padding=1, bias=True),  # phase-ordered
    site("t2_f32_all_taps", 2, True, n=8, cin=48, cout=32, size=32, kernel=3, stride=2, bias=True),
    site("f1_1x", 1, False, n=8, cin=64, cout=64, size=1000, kernel=5, padding=2, precision="1xtf32"),
    site("nc_f32", 2, False, n=4, cin=3, cout=64, size=224, kernel=7, stride=2, padding=3, x_layout="nc", out_layout="nc"),
]


def S(**kw) -> ConvSpec:
    base = dict(name="s", n=1, cin=4, cout=4, size=(5, 5), kernel=(3, 3))
    return ConvSpec(**{**base, **kw})


@pytest.mark.parametrize("spec, why", [
    (S(dtype="float64"), "dtype"),
    (S(groups=3), "groups"),
    (S(kernel=(7, 7)), "empty output"),
    (S(stride=(2,)), "rank"),
    (S(output_padding=(1, 1)), "output padding of a forward"),
    (S(transposed=True, stride=(2, 2), output_padding=(2, 0)), "output padding not below"),
    (S(precision="native"), "precision"),
    (S(inputs=(ConvInput("acc", "chan", (1,)),)), "epilogue input"),
    (S(inputs=(ConvInput("r", "full", (1, 1)),)), "epilogue input"),
    (S(sm80_tile=(256, 128, 64, 64)), "tile"),
    (S(pool="max", pool_window=(3, 1)), "pool"),
    (S(pool="sum", pool_window=(2, 2)), "pool"),
    (S(pool="max", pool_window=(2, 2), inputs=(ConvInput("r", "full", (1, 1, 1, 1)),), post="v + r(q, c)"), "after the pool"),
])
def test_unsupported_says_why(spec, why):
    assert why in (unsupported(spec) or "")


def test_output_sizes_match_torch():
    for tr in (False, True):
        s = site("o", 2, tr, size=(7, 8), kernel=(3, 2), stride=(2, 3), padding=(1, 0), dilation=(2, 1),
                 output_padding=(1, 2) if tr else 0, cin=4, cout=6, groups=2).spec
        x = torch.zeros(1, 4, 7, 8)
        w = torch.zeros(s.weight_shape)
        y = (F.conv_transpose2d(x, w, None, s.stride, s.padding, s.output_padding, 2, s.dilation) if tr
             else F.conv2d(x, w, None, s.stride, s.padding, s.dilation, 2))
        assert tuple(y.shape[2:]) == s.out_size


@pytest.mark.parametrize("tr", [False, True])
def test_packed_weight_is_the_gemm_b_operand(tr):
    """Packed [g * COG, taps, CIG]: the GEMM of the im2col matrix with it is the convolution (forward)."""
    g, cin, cout = 2, 4, 6
    w = torch.randn((cin, cout // g, 2, 3) if tr else (cout, cin // g, 2, 3), dtype=torch.float64)
    p = _tw_conv_pack(w, g, tr)
    assert p.shape == (cout, 6, cin // g) and p.is_contiguous()
    for gi in range(g):
        for j in range(cout // g):
            for ic in range(cin // g):
                ref = w[gi * (cin // g) + ic, j] if tr else w[gi * (cout // g) + j, ic]
                assert torch.equal(p[gi * (cout // g) + j, :, ic], ref.reshape(-1))


def test_channels_last_of_any_rank():
    for shape in ((2, 3, 5), (2, 3, 4, 5), (2, 3, 2, 4, 5)):
        x = torch.randn(shape)
        y = _tw_channels_last(x)
        assert torch.equal(x, y) and y.movedim(1, -1).is_contiguous()
        assert _tw_channels_last(y) is y


def test_phase_ordered_rows_where_a_transposed_stride_leaves_taps_reading_zero():
    assert plan(site("a", 2, True, cin=32, kernel=4, stride=2, padding=1).spec).phased
    assert not plan(site("a", 2, True, cin=32, kernel=3, stride=2).spec).phased  # 13 = 2 x 6 + 1 outputs
    assert not plan(site("a", 2, True, cin=16, kernel=4, stride=2, padding=1).spec).phased  # half a k-tile a tap
    assert not plan(site("a", 2, False, cin=32, kernel=4, stride=2, padding=1).spec).phased
    assert not plan(site("a", 2, True, cin=32, kernel=3, stride=1).spec).phased


def test_plan_gathers_in_16_bytes_only_where_chunks_stay_in_one_tap():
    assert plan(site("a", cin=8).spec).vec
    assert not plan(site("a", cin=6).spec).vec  # fp32: 4 channels a chunk
    assert plan(site("a", cin=8, dtype="float16").spec).vec and not plan(site("a", cin=4, dtype="float16").spec).vec
    assert not plan(site("a", cin=8, x_layout="nc").spec).vec
    assert not plan(site("a", cin=8, groups=4).spec).vec  # 2 channels a group


def ptxas_logs(out, cases, *flags: str) -> dict[str, str]:
    """{arch: nvcc's verbose ptxas log} of `cases`' sites built for each arch at once, in `out`; a failed build fails."""
    cu = out / "sites.cu"
    cu.write_text(conv_source([c.spec for c in cases]))
    procs = {arch: subprocess.Popen([NVCC, flag, *TORCH_NVCC, "-std=c++17", "-O3", *flags, "-cubin", "-Xptxas", "-v",
                                     str(cu), "-o", str(out / f"{arch}.cubin")], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for arch, flag in ARCHS.items()}
    logs = {arch: proc.communicate()[0] for arch, proc in procs.items()}
    for arch, proc in procs.items():
        assert proc.returncode == 0, logs[arch][-3000:]
    return logs


@pytest.fixture(scope="module")
def nvcc_logs(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not installed")
    return ptxas_logs(tmp_path_factory.mktemp("conv_nvcc"), NVCC_CASES, "-lineinfo")


@pytest.mark.parametrize("arch", list(ARCHS))
def test_nvcc_builds_without_spills(nvcc_logs, arch):
    """Every kernel (the element gather build always; the 16-byte gather build and the wgmma loop where
    the site has them, the latter empty in the sm_80 build) has a zero-byte stack frame and no spills,
    and ptxas neither serialises wgmma nor ignores setmaxnreg (C7508, C7517, C7518)."""
    log = nvcc_logs[arch]
    assert not re.findall(r"C75(07|08|17|18)[^\n]*", log), re.findall(r"C75\d\d[^\n]*", log)
    kernels = re.findall(r"Function properties for (\w+)\n\s+(\d+) bytes stack frame, (\d+) bytes spill stores", log)
    want = sum(1 + plan(c.spec).vec + (plan(c.spec).sm90 is not None) for c in NVCC_CASES)
    assert len(kernels) == want, log[-2000:]
    assert [k for k, frame, spill in kernels if frame != "0" or spill != "0"] == []
    if arch == "sm90a":  # two consumer warpgroups: 168 registers at entry, setmaxnreg moves them
        regs = re.findall(r"Compiling entry function '_Z8twc_sm90I\d+twc_site_\w+?Li(\d+)E\w*' for 'sm_90a'.*?"
                          r"Used (\d+) registers", log, re.S)
        assert len(regs) == sum(plan(c.spec).sm90 is not None for c in NVCC_CASES)
        assert all(r == "168" for bm, r in regs if bm == "128"), regs


def test_bench_dry_run_compiles_and_plans_the_seeds(tmp_path):
    """bench/conv.py --dry-run: the layer sites compile (sm_90a and sm_80), every seed's convolution is ours."""
    if NVCC is None:
        pytest.skip("nvcc not installed")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "bench" / "conv.py"), str(tmp_path), "--dry-run", "--only",
                           "r50_1x1_h16", "seeds", "--jobs", "1"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count("'every convolution ours': True") == 4, proc.stdout
    assert (tmp_path / "r50_1x1_h16.so").exists()
