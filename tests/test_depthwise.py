"""Depthwise convolutions: capture to the anchor, kernel plans, tiling, emitted source, and the
generated kernels run on the host (g++) against PyTorch over many shapes. No GPU needed."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dw_host import GXX, SENTINEL, run_on_host
from helpers import Fn, kernels
from torchweld.capture import capture
from torchweld.tiling import SMEM_BUDGET, Geometry, tiling
from torchweld.codegen import module_source
from torchweld.pipeline import compile_problem
from torchweld.plan import describe, plan
from torchweld.problem import load_problem
from torchweld.simplify import simplify

ROOT = Path(__file__).resolve().parents[1]
NVCC = shutil.which("nvcc")


def _kinds(p):
    nodes = p.graph.by_name()
    return [(k.kind, [nodes[m].op for m in k.nodes]) for k in p.kernels]


def _dw(s, x, **kw):
    return F.conv2d(x, s.w, s.b, groups=x.shape[1], **kw)


# --- capture and plan -------------------------------------------------------------------------

def test_depthwise_conv_and_epilogue_are_one_kernel():
    p = kernels(lambda s, x: x + F.silu(_dw(s, x, padding=3)), torch.randn(2, 8, 12, 12),
                w=torch.randn(8, 1, 7, 7), b=torch.randn(8))
    assert _kinds(p) == [("depthwise", ["depthwise_conv", "silu", "add"])]
    k = p.kernels[0]
    assert k.shape == (2, 8, 12, 12) and set(k.inputs) == {"x0", "p0", "p1"}  # the bias is read by the kernel
    assert "aten.convolution" not in describe(p)


def test_other_convolutions_stay_library_calls():
    x = torch.randn(2, 8, 10, 10)
    for fn, w in [(lambda s, x: torch.relu(F.conv2d(x, s.w, padding=1)), torch.randn(8, 8, 3, 3)),  # dense
                  (lambda s, x: torch.relu(F.conv2d(x, s.w, padding=1, groups=4)), torch.randn(8, 2, 3, 3)),  # grouped
                  (lambda s, x: torch.relu(F.conv_transpose2d(x, s.w, groups=8)), torch.randn(8, 1, 3, 3))]:
        p = kernels(fn, x, w=w)
        assert _kinds(p) == [("pointwise", ["relu"])], p
        assert "aten.convolution.default" in describe(p)
    p = kernels(lambda s, x: torch.relu(F.conv3d(x, s.w, groups=4)), torch.randn(1, 4, 5, 5, 5), w=torch.randn(4, 1, 3, 3, 3))
    assert _kinds(p) == [("pointwise", ["relu"])]


def test_multiplier_and_1d_capture():
    p = kernels(lambda s, x: torch.tanh(F.conv1d(x, s.w, None, stride=2, padding=1, groups=4)), torch.randn(2, 4, 31),
                w=torch.randn(8, 1, 3))
    (k,) = p.kernels
    a = p.graph.by_name()[k.anchor]
    assert k.kind == "depthwise" and a.shape == (2, 8, 16) and a.args[2] is None
    assert dict(a.attrs) == {"dilation": (1,), "groups": 4, "padding": (1,), "stride": (2,)}


def test_causal_slice_folds_into_the_convolution():
    """conv1d(padding=k-1)[..., :L] (Mamba's causal conv): one convolution of length L, SiLU fused."""
    p = kernels(lambda s, x: F.silu(F.conv1d(x, s.w, s.b, padding=3, groups=8)[..., :x.shape[-1]]), torch.randn(2, 8, 50),
                w=torch.randn(8, 1, 4), b=torch.randn(8))
    assert _kinds(p) == [("depthwise", ["depthwise_conv", "silu"])]
    a = p.graph.by_name()[p.kernels[0].anchor]
    assert a.shape == (2, 8, 50) and a.attr("window") == (0,) and any("fold_depthwise_crop" in s for s in p.graph.log)
    kept = kernels(lambda s, x: (lambda y: (y, F.silu(y[..., :50])))(F.conv1d(x, s.w, padding=3, groups=8)),
                   torch.randn(2, 8, 50), w=torch.randn(8, 1, 4))  # the whole output is needed too: no fold
    assert all(n.attr("window") is None for n in kept.graph.nodes if n.op == "depthwise_conv")


def test_conv_input_producer_is_not_a_prologue():
    """relu(x) feeds the conv: it stays its own kernel (the conv reads its input tile as stored)."""
    p = kernels(lambda s, x: torch.sigmoid(_dw(s, torch.relu(x), padding=1)), torch.randn(2, 4, 9, 9),
                w=torch.randn(4, 1, 3, 3), b=torch.randn(4))
    assert sorted(_kinds(p)) == [("depthwise", ["depthwise_conv", "sigmoid"]), ("pointwise", ["relu"])]


def test_conv_value_needed_outside_is_an_output_too():
    def fn(s, x):
        y = _dw(s, x, padding=1)
        return y, torch.relu(y) * 2.0

    p = kernels(fn, torch.randn(2, 4, 9, 9), w=torch.randn(4, 1, 3, 3), b=torch.randn(4))
    (k,) = [k for k in p.kernels if k.kind == "depthwise"]
    assert k.anchor in k.outputs and len(k.outputs) == 2


def test_convolutions_the_kernel_would_not_suit_stay_in_cudnn():
    """No tiling (one thread's tile over the shared memory limit), or more than MAX_MULTIPLIER outputs
    per input channel (a grey image's first layer): library calls, their bias joining the next kernel."""
    for x, w in [(torch.randn(1, 2, 14000), torch.randn(2, 1, 13000)),
                 (torch.randn(2, 1, 20, 20), torch.randn(16, 1, 3, 3))]:
        conv = F.conv1d if x.dim() == 3 else F.conv2d
        p = kernels(lambda s, x: torch.relu(conv(x, s.w, s.b, groups=x.shape[1])), x, w=w, b=torch.randn(w.shape[0]))
        assert _kinds(p) == [("pointwise", ["add", "relu"])]
        assert "aten.convolution.default" in describe(p)


# --- tiling -----------------------------------------------------------------------------------

def test_tiling_of_the_corpus_shape():
    """32x256x56x56, 7x7: one block per plane, 14x14 threads of 4x4 outputs, weights in registers."""
    t = tiling(Geometry(32, 256, 1, 56, 56, 56, 56, 7, 7, 1, 1, 3, 3))
    assert (t.TX, t.TY, t.VH, t.VW, t.PB, t.tiles_h, t.tiles_w) == (14, 14, 4, 4, 1, 1, 1)
    assert t.regs and t.vec and (t.IH, t.IWP, t.RH, t.LS) == (62, 64, 10, 12)


@pytest.mark.parametrize("g", [
    Geometry(8, 32, 1, 224, 224, 224, 224, 3, 3, 1, 1, 1, 1),
    Geometry(8, 32, 1, 230, 230, 115, 115, 7, 7, 2, 2, 3, 3),
    Geometry(8, 32, 2, 1, 4096, 1, 4096, 1, 31, 1, 1, 0, 15),
    Geometry(64, 512, 1, 7, 7, 7, 7, 3, 3, 1, 1, 1, 1),
    Geometry(2, 16, 1, 64, 64, 64, 64, 11, 11, 1, 1, 5, 5),
])
def test_tiling_covers_the_output_within_budget(g):
    t = tiling(g)
    assert t.tiles_h * t.TY * t.VH >= g.OH and t.tiles_w * t.TX * t.VW >= g.OW
    assert (t.tiles_h - 1) * t.TY * t.VH < g.OH and (t.tiles_w - 1) * t.TX * t.VW < g.OW  # no empty tiles
    assert 4 * t.PB * (t.tile + g.M * (g.KH * g.KW + 1)) <= SMEM_BUDGET
    assert t.threads <= 256 and t.IWP % 4 == 0
    assert t.regs == (g.KH * g.KW <= 64)


# --- emitted source ---------------------------------------------------------------------------

def test_emitted_corpus_problem():
    result = compile_problem(load_problem(ROOT / "problems" / "conv" / "conv2d_depthwise_silu_residual.py"))
    src = result.source
    assert "1 depthwise convolution(s) with their pointwise neighbours" in src
    assert "torch.convolution" not in src.split("def _tw_general")[0].split("class ModelNew")[1]
    assert "__global__ void __launch_bounds__(196) k0(" in src and "k0<<<8192u, 196" in src
    assert "const float x0 = tl[(a + 3) * 64 + b + 3];" in src  # the residual comes from the tile
    assert "s[q] = *reinterpret_cast<const tw_vec<float, 4>*>(tl + r * 64 + 4 * q);" in src
    assert "if (j < 49) v = tw_ld(in_p0[c * 49u + j]);" in src and "else v = tw_ld(in_p1[c * 1u + (j - 49)]);" in src
    assert "*reinterpret_cast<tw_vec<float, 4>*>(out_v5 + ob" in src
    assert "#include <torch" not in src and "_tw_conv" not in src
    assert "or p0.shape != (256, 1, 7, 7)):" in src  # another kernel size takes the general path


def test_wrapper_hands_the_kernel_contiguous_input_and_weight():
    """A transposed (B, L, D) -> (B, D, L) input is read contiguous, whatever its captured strides."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(16, 16, 4, padding=3, groups=16)

        def forward(self, x):
            return F.silu(self.conv(x.transpose(1, 2)))

    from torchweld.emit import emit

    p = plan(simplify(capture(M(), [torch.randn(2, 40, 16)])))
    (k,) = p.kernels
    x = p.graph.by_name()[k.inputs[0]]
    assert x.stride != (640, 40, 1)  # captured as a transposed view
    src = emit(p, "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
                  "class Model(nn.Module):\n    def forward(self, x):\n        return x\n", "t")
    assert f"    if not a_{x.name}.is_contiguous():\n        a_{x.name} = a_{x.name}.contiguous()" in src
    assert "_tw_layout(a_" + x.name not in src


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_nvcc_compiles_every_mode(tmp_path):
    """Vector and scalar segments, per-tap weights, several planes a block, fp16/bf16, 64-bit indices."""
    import subprocess

    sources = []
    for p, _, _ in _cases()[::3] + [_big_index_case()]:
        sources.append(module_source(list(p.kernels), p.graph))
    for i, src in enumerate(sources):
        cu = tmp_path / f"dw{i}.cu"
        cu.write_text(src)
    procs = [subprocess.Popen([NVCC, "-arch=sm_90", "-O3", "-c", str(tmp_path / f"dw{i}.cu"), "-o",
                               str(tmp_path / f"dw{i}.o")], stderr=subprocess.PIPE, text=True)
             for i in range(len(sources))]
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err[-2000:]


def _big_index_case():
    """Outputs past 2^31 elements: 64-bit index arithmetic (the plan only; nothing runs)."""
    p = plan(simplify(capture(Fn(lambda s, x: F.relu(_dw(s, x, padding=1)), w=torch.randn(64, 1, 3, 3), b=torch.randn(64)),
                              [torch.empty(1024, 64, 200, 200, device="meta")])))
    return p, None, None


# --- the kernels run on the host against PyTorch --------------------------------------------

def _case(fn, xs, dtype=torch.float32, **params):
    xs = [x.to(dtype) for x in xs]
    m = Fn(fn, **{k: v.to(dtype) for k, v in params.items()})
    p = plan(simplify(capture(m, xs)))
    return p, dict(m.named_parameters()), xs


def _cases():
    torch.manual_seed(0)
    r = torch.randn
    C = 3

    def conv(stride=1, padding=0, dilation=1):
        return lambda s, x: F.conv2d(x, s.w, getattr(s, "b", None), stride, padding, dilation, x.shape[1])

    def conv1(stride=1, padding=0, dilation=1):
        return lambda s, x: F.conv1d(x, s.w, getattr(s, "b", None), stride, padding, dilation, x.shape[1])

    c = []
    k = conv(padding=1)
    c.append(_case(lambda s, x: torch.relu(k(s, x)), [r(2, C, 16, 16)], w=r(C, 1, 3, 3), b=r(C)))
    k1 = conv(stride=2, padding=1)
    c.append(_case(lambda s, x: k1(s, x), [r(2, 4, 15, 21)], w=r(4, 1, 3, 3)))
    k2 = conv(padding=2)
    c.append(_case(lambda s, x: F.gelu(k2(s, x)), [r(2, C, 19, 23)], w=r(2 * C, 1, 5, 5), b=r(2 * C)))
    k3 = conv(padding=4, dilation=2)
    c.append(_case(lambda s, x: x + F.gelu(k3(s, x)), [r(2, C, 20, 20)], w=r(C, 1, 5, 5), b=r(C)))
    k4 = conv(padding=3)
    c.append(_case(lambda s, x: x + F.silu(k4(s, x)), [r(2, C, 13, 17)], w=r(C, 1, 7, 7), b=r(C)))
    k5 = conv(stride=2)
    c.append(_case(lambda s, x: torch.sigmoid(k5(s, x)), [r(2, C, 30, 31)], w=r(C, 1, 7, 7), b=r(C)))
    k6 = conv(dilation=2)
    c.append(_case(lambda s, x: k6(s, x) * 0.5, [r(1, 2, 9, 9)], w=r(4, 1, 3, 3), b=r(4)))
    k7 = conv(stride=2, padding=3)
    c.append(_case(lambda s, x: k7(s, x) - 1.0, [r(2, C, 11, 12)], w=r(C, 1, 3, 3)))
    c.append(_case(lambda s, x: torch.tanh(F.conv2d(x, s.w, s.b, groups=C)), [r(2, C, 8, 8)], w=r(C, 1, 1, 1), b=r(C)))
    k8 = conv(stride=(1, 2), padding=(1, 2), dilation=(2, 1))
    c.append(_case(lambda s, x: F.elu(k8(s, x)), [r(2, C, 17, 19)], w=r(C, 1, 3, 5), b=r(C)))
    k9 = conv(padding=4)  # 81 taps: weights per tap from shared memory
    c.append(_case(lambda s, x: torch.relu(k9(s, x)) + x, [r(1, 2, 20, 24)], w=r(2, 1, 9, 9), b=r(2)))
    k10 = conv(stride=2, padding=1, dilation=2)
    c.append(_case(lambda s, x: torch.relu(k10(s, x)), [r(1, 2, 25, 27)], w=r(4, 1, 9, 9)))
    c.append(_case(lambda s, x: F.hardswish(k(s, x)), [r(1, 2, 70, 300)], w=r(2, 1, 3, 3), b=r(2)))  # tiles across and down
    k11 = conv(stride=2, padding=3)
    c.append(_case(lambda s, x: k11(s, x), [r(1, 1, 230, 230)], w=r(1, 1, 7, 7), b=r(1)))  # tiles shrunk for shared memory
    c.append(_case(lambda s, x: F.relu6(k(s, x)), [r(2, 37, 7, 7)], w=r(37, 1, 3, 3), b=r(37)))  # planes share blocks
    c.append(_case(lambda s, x: conv()(s, x), [r(2, 5, 5, 5)], w=r(5, 1, 3, 3)))  # 3x3 outputs
    c.append(_case(lambda s, x: conv()(s, x) + 1.0, [r(2, 5, 3, 3)], w=r(10, 1, 3, 3)))  # 1x1 outputs, multiplier 2
    c.append(_case(lambda s, x: F.silu(k(s, x)), [r(2, C, 11, 13)], w=r(4 * C, 1, 3, 3), b=r(4 * C)))  # multiplier 4
    c.append(_case(lambda s, x: (lambda y: (y, torch.relu(y) * s.g))(k(s, x)), [r(2, C, 10, 10)], w=r(C, 1, 3, 3),
                   b=r(C), g=r(C, 1, 1)))
    c.append(_case(lambda s, x, z: z * torch.sigmoid(k4(s, x) * s.g + s.h), [r(2, C, 12, 12), r(2, C, 12, 12)],
                   w=r(C, 1, 7, 7), g=r(C, 1, 1), h=r(1, C, 1, 1)))
    c.append(_case(lambda s, x: F.silu(conv1(padding=3)(s, x)), [r(2, 6, 33)], w=r(6, 1, 4), b=r(6)))
    c.append(_case(lambda s, x: F.silu(conv1(padding=15)(s, x)), [r(2, 4, 100)], w=r(4, 1, 31), b=r(4)))
    c.append(_case(lambda s, x: conv1(stride=2, padding=1)(s, x), [r(2, C, 29)], w=r(2 * C, 1, 3)))
    c.append(_case(lambda s, x: torch.relu(conv1(padding=32)(s, x)), [r(1, 2, 150)], w=r(2, 1, 65), b=r(2)))
    c.append(_case(lambda s, x: x * conv1(padding=6, dilation=3)(s, x), [r(2, C, 40)], w=r(C, 1, 5), b=r(C)))
    c.append(_case(lambda s, x: F.silu(k(s, x)), [r(2, 8, 14, 14)], torch.float16, w=r(8, 1, 3, 3), b=r(8)))
    k12 = conv(stride=2, padding=2)
    c.append(_case(lambda s, x: torch.relu(k12(s, x)), [r(2, 4, 17, 18)], torch.bfloat16, w=r(4, 1, 5, 5), b=r(4)))
    c.append(_case(lambda s, x: x + F.silu(conv1(padding=3)(s, x)[..., :-3]), [r(2, 6, 33)], torch.float16,
                   w=r(6, 1, 4), b=r(6)))  # causal: the slice folds into the convolution
    c.append(_case(lambda s, x: x + F.silu(conv1(padding=3)(s, x)[:, :, :x.shape[-1]]), [r(2, 6, 37)], w=r(6, 1, 4),
                   b=r(6)))
    c.append(_case(lambda s, x: x[:, :, 1:-3, 2:] * torch.sigmoid(k2(s, x)[:, :, 1:-3, 2:]), [r(2, C, 15, 14)],
                   w=r(C, 1, 5, 5), b=r(C)))  # the residual is a strided view
    c.append(_case(lambda s, x: torch.relu(conv(stride=2, padding=1)(s, x)[..., 1:, :-1]), [r(2, C, 17, 16)],
                   w=r(C, 1, 3, 3), b=r(C)))
    c.append(_case(lambda s, x: torch.exp(conv1(dilation=2)(s, x)[..., 3:]), [r(2, 4, 40)], w=r(4, 1, 3), b=r(4)))
    c.append(_case(lambda s, x: x + F.silu(k4(s, x)), [r(1, 2, 13, 17)], torch.bfloat16, w=r(2, 1, 7, 7), b=r(2)))
    return c


def _special(shape):
    x = torch.randn(shape)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel())[:6]
    flat[idx] = torch.tensor([float("nan"), float("inf"), float("-inf"), float("inf"), 3e38, -0.0])
    return x


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_kernels_match_pytorch_on_the_host(tmp_path):
    cases = _cases()
    torch.manual_seed(1)
    k = lambda s, x: F.conv2d(x, s.w, s.b, 1, 1, 1, x.shape[1])  # noqa: E731
    cases.append(_case(lambda s, x: x + torch.relu(k(s, x)), [_special((2, 3, 9, 10))], w=torch.randn(3, 1, 3, 3),
                       b=torch.randn(3)))
    for p, _, _ in cases:
        assert [kk.kind for kk in p.kernels].count("depthwise") == 1, describe(p)
    results = run_on_host(cases, tmp_path)
    bad = []
    for i, res in enumerate(results):
        for name, got in res["got"].items():
            want = res["want"][name]
            tol = 1e-4 if want.dtype == torch.float32 else 1e-2
            g, w = got.float(), want.float()
            if not torch.allclose(g, w, atol=tol, rtol=tol, equal_nan=True) or (g == SENTINEL).any():
                where = (~torch.isclose(g, w, atol=tol, rtol=tol, equal_nan=True)).nonzero()[:3].tolist()
                bad.append(f"case {i} {name} {tuple(w.shape)}: first mismatches at {where}: "
                           f"got {[g[tuple(j)].item() for j in where]}, want {[w[tuple(j)].item() for j in where]}")
    assert not bad, "\n".join(bad)
    special = results[-1]["got"]
    assert all(v.isnan().any() and v.isinf().any() for v in special.values())
