"""Depthwise convolutions: capture to the anchor, kernel plans, tiling, emitted source, and the
generated kernels built by nvcc and run on the CPU emulator against PyTorch over many shapes. No GPU needed."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from emulator import GXX, emulate, mismatch, write_problem
from helpers import NVCC, Fn, kernels, nvcc_errors
from torchweld.capture import capture
from torchweld.tiling import SMEM_BUDGET, Geometry, tiling
from torchweld.codegen import module_source
from torchweld.pipeline import compile_problem
from torchweld.plan import describe, plan
from torchweld.problem import load_problem
from torchweld.simplify import simplify

ROOT = Path(__file__).resolve().parents[1]


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
    assert "__global__ void __launch_bounds__(196) k0(" in src
    assert "k0<<<(unsigned)(nb * 256ull), 196" in src  # NOTE: the batch is a runtime size: 256 planes each
    assert "const float x0 = tl[(a + 3) * 64 + b + 3];" in src  # the residual comes from the tile
    assert "s[q] = *reinterpret_cast<const tw_vec<float, 4>*>(tl + r * 64 + 4 * q);" in src
    assert "if (j < 49) v = tw_ld(in_p0[c * 49u + j]);" in src and "else v = tw_ld(in_p1[c * 1u + (j - 49)]);" in src
    assert "*reinterpret_cast<tw_vec<float, 4>*>(out_v5 + ob" in src
    assert "#include <torch" not in src and "_tw_conv" not in src
    assert "or p0.shape != (256, 1, 7, 7)\n" in src  # another kernel size takes the general path


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


# --- every mode, built by nvcc and run on the CPU emulator against PyTorch ----------------------

C = 3
CASES = [  # (outputs, input shapes, parameter shapes, dtype): one case, one depthwise kernel
    (["torch.relu(conv(x, self.w, self.b, padding=1))"], [(2, C, 16, 16)], {"w": (C, 1, 3, 3), "b": (C,)}),
    (["conv(x, self.w, None, 2, 1)"], [(2, 4, 15, 21)], {"w": (4, 1, 3, 3)}),
    (["F.gelu(conv(x, self.w, self.b, padding=2))"], [(2, C, 19, 23)], {"w": (2 * C, 1, 5, 5), "b": (2 * C,)}),
    (["x + F.gelu(conv(x, self.w, self.b, padding=4, dilation=2))"], [(2, C, 20, 20)], {"w": (C, 1, 5, 5), "b": (C,)}),
    (["x + F.silu(conv(x, self.w, self.b, padding=3))"], [(2, C, 13, 17)], {"w": (C, 1, 7, 7), "b": (C,)}),
    (["torch.sigmoid(conv(x, self.w, self.b, 2))"], [(2, C, 30, 31)], {"w": (C, 1, 7, 7), "b": (C,)}),
    (["conv(x, self.w, self.b, dilation=2) * 0.5"], [(1, 2, 9, 9)], {"w": (4, 1, 3, 3), "b": (4,)}),
    (["conv(x, self.w, None, 2, 3) - 1.0"], [(2, C, 11, 12)], {"w": (C, 1, 3, 3)}),
    (["torch.tanh(conv(x, self.w, self.b))"], [(2, C, 8, 8)], {"w": (C, 1, 1, 1), "b": (C,)}),
    (["F.elu(conv(x, self.w, self.b, (1, 2), (1, 2), (2, 1)))"], [(2, C, 17, 19)], {"w": (C, 1, 3, 5), "b": (C,)}),
    # 81 taps: weights per tap from shared memory
    (["torch.relu(conv(x, self.w, self.b, padding=4)) + x"], [(1, 2, 20, 24)], {"w": (2, 1, 9, 9), "b": (2,)}),
    (["torch.relu(conv(x, self.w, None, 2, 1, 2))"], [(1, 2, 25, 27)], {"w": (4, 1, 9, 9)}),
    # tiles across and down; tiles shrunk for shared memory; planes share blocks
    (["F.hardswish(conv(x, self.w, self.b, padding=1))"], [(1, 2, 70, 300)], {"w": (2, 1, 3, 3), "b": (2,)}),
    (["conv(x, self.w, self.b, 2, 3)"], [(1, 1, 230, 230)], {"w": (1, 1, 7, 7), "b": (1,)}),
    (["F.relu6(conv(x, self.w, self.b, padding=1))"], [(2, 37, 7, 7)], {"w": (37, 1, 3, 3), "b": (37,)}),
    (["conv(x, self.w)"], [(2, 5, 5, 5)], {"w": (5, 1, 3, 3)}),  # 3x3 outputs
    (["conv(x, self.w) + 1.0"], [(2, 5, 3, 3)], {"w": (10, 1, 3, 3)}),  # 1x1 outputs, multiplier 2
    (["F.silu(conv(x, self.w, self.b, padding=1))"], [(2, C, 11, 13)],  # multiplier 4
     {"w": (4 * C, 1, 3, 3), "b": (4 * C,)}),
    (["(y := conv(x, self.w, self.b, padding=1))", "torch.relu(y) * self.g"], [(2, C, 10, 10)],
     {"w": (C, 1, 3, 3), "b": (C,), "g": (C, 1, 1)}),
    (["z * torch.sigmoid(conv(x, self.w, None, padding=3) * self.g + self.h)"], [(2, C, 12, 12), (2, C, 12, 12)],
     {"w": (C, 1, 7, 7), "g": (C, 1, 1), "h": (1, C, 1, 1)}),
    (["F.silu(conv1(x, self.w, self.b, padding=3))"], [(2, 6, 33)], {"w": (6, 1, 4), "b": (6,)}),
    (["F.silu(conv1(x, self.w, self.b, padding=15))"], [(2, 4, 100)], {"w": (4, 1, 31), "b": (4,)}),
    (["conv1(x, self.w, None, 2, 1)"], [(2, C, 29)], {"w": (2 * C, 1, 3)}),
    (["torch.relu(conv1(x, self.w, self.b, padding=32))"], [(1, 2, 150)], {"w": (2, 1, 65), "b": (2,)}),
    (["x * conv1(x, self.w, self.b, padding=6, dilation=3)"], [(2, C, 40)], {"w": (C, 1, 5), "b": (C,)}),
    (["F.silu(conv(x, self.w, self.b, padding=1))"], [(2, 8, 14, 14)], {"w": (8, 1, 3, 3), "b": (8,)}, "float16"),
    (["torch.relu(conv(x, self.w, self.b, 2, 2))"], [(2, 4, 17, 18)], {"w": (4, 1, 5, 5), "b": (4,)}, "bfloat16"),
    (["x + F.silu(conv1(x, self.w, self.b, padding=3)[..., :-3])"], [(2, 6, 33)],  # causal: the slice folds in
     {"w": (6, 1, 4), "b": (6,)}, "float16"),
    (["x + F.silu(conv1(x, self.w, self.b, padding=3)[:, :, :x.shape[-1]])"], [(2, 6, 37)], {"w": (6, 1, 4), "b": (6,)}),
    (["x[:, :, 1:-3, 2:] * torch.sigmoid(conv(x, self.w, self.b, padding=2)[:, :, 1:-3, 2:])"], [(2, C, 15, 14)],
     {"w": (C, 1, 5, 5), "b": (C,)}),  # the residual is a strided view
    (["torch.relu(conv(x, self.w, self.b, 2, 1)[..., 1:, :-1])"], [(2, C, 17, 16)], {"w": (C, 1, 3, 3), "b": (C,)}),
    (["torch.exp(conv1(x, self.w, self.b, dilation=2)[..., 3:])"], [(2, 4, 40)], {"w": (4, 1, 3), "b": (4,)}),
    (["x + F.silu(conv(x, self.w, self.b, padding=3))"], [(1, 2, 13, 17)], {"w": (2, 1, 7, 7), "b": (2,)}, "bfloat16"),
    # NOTE: last: its input holds NaN, +-inf, 3e38 and -0.0 (_special)
    (["x + torch.relu(conv(x, self.w, self.b, padding=1))"], [(2, 3, 9, 10)], {"w": (3, 1, 3, 3), "b": (3,)}),
]

PROBLEM = """\"\"\"Every depthwise case as a submodule of one model.\"\"\"
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv(x, w, b=None, stride=1, padding=0, dilation=1):
    return F.conv2d(x, w, b, stride, padding, dilation, x.shape[1])


def conv1(x, w, b=None, stride=1, padding=0, dilation=1):
    return F.conv1d(x, w, b, stride, padding, dilation, x.shape[1])

{cases}
class Model(nn.Module):
    def __init__(self):
        super().__init__()
{members}

    def forward(self, {args}):
        return ({calls})


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
"""


def _problem_source() -> str:
    classes, calls, inputs, n = [], [], [], 0
    for i, (outs, shapes, params, *dtype) in enumerate(CASES):
        dt = dtype[0] if dtype else "float32"
        names = [f"x{n + j}" for j in range(len(shapes))]
        n += len(shapes)
        init = "".join(f"        self.{p} = nn.Parameter(torch.randn({s}, dtype=torch.{dt}))\n" for p, s in params.items())
        classes.append(f"\nclass Case{i}(nn.Module):\n    def __init__(self):\n        super().__init__()\n{init}\n"
                       f"    def forward(self, {', '.join('xz'[:len(shapes)])}):\n        return ({', '.join(outs)},)\n\n")
        calls.append(f"self.c{i}({', '.join(names)})")
        inputs += [f"torch.randn({s}, dtype=torch.{dt})" for s in shapes]
    return PROBLEM.format(cases="".join(classes), args=", ".join(f"x{j}" for j in range(n)),
                          members="\n".join(f"        self.c{i} = Case{i}()" for i in range(len(CASES))),
                          calls="\n            + ".join(calls), inputs=", ".join(inputs))


@pytest.fixture(scope="module")
def every_case(tmp_path_factory):
    """(problem file, compile result) of the model holding every case."""
    path = write_problem(tmp_path_factory.mktemp("dw"), "depthwise_cases", _problem_source())
    return path, compile_problem(load_problem(path))


def test_every_case_is_one_depthwise_kernel(every_case):
    _, result = every_case
    assert [k.kind for k in result.plan.kernels].count("depthwise") == len(CASES), describe(result.plan)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_nvcc_compiles_every_mode(every_case, tmp_path):
    """Vector and scalar segments, per-tap weights, several planes a block, fp16/bf16, 64-bit indices."""
    plans = {"cases": every_case[1].plan, "big_index": _big_index_plan()}
    errors = nvcc_errors({name: module_source(list(p.kernels), p.graph) for name, p in plans.items()}, tmp_path / "dw.cu")
    assert not errors, errors


def _big_index_plan():
    """Outputs past 2^31 elements: 64-bit index arithmetic (the plan only; nothing runs)."""
    return plan(simplify(capture(Fn(lambda s, x: F.relu(_dw(s, x, padding=1)), w=torch.randn(64, 1, 3, 3), b=torch.randn(64)),
                                 [torch.empty(1024, 64, 200, 200, device="meta")])))


def _special(shape):
    x = torch.randn(shape)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel())[:6]
    flat[idx] = torch.tensor([float("nan"), float("inf"), float("-inf"), float("inf"), 3e38, -0.0])
    return x


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_kernels_match_pytorch_on_the_emulator(every_case, tmp_path):
    """Every case's outputs as eager's (fp16/bf16 cases: eager in fp32 on the same values, rounded),
    every output element written; the special case's NaN and inf come through."""
    path, result = every_case
    new_cls, _ = emulate(result, tmp_path)
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    new._tw_general = None  # NOTE: the kernels must run: a fallback to the original forward would fail here
    torch.manual_seed(1)
    inputs = namespace["get_inputs"]()
    inputs[-1] = _special(inputs[-1].shape)
    with torch.no_grad():
        want = copy.deepcopy(ref).float()(*[t.float() for t in inputs])
        got = new(*[t.clone() for t in inputs])
    lib = type(new).forward.__globals__["_LIB"]
    assert len(lib.launched) == len(result.plan.kernels)
    bad = [f"output {i}: {m}" for i, (g, w) in enumerate(zip(got, want))
           if (m := mismatch(g, w.to(g.dtype), 1e-4 if g.dtype == torch.float32 else 1e-2))]
    assert not bad, "\n".join(bad)
    special = got[-1]
    assert special.isnan().any() and special.isinf().any()
