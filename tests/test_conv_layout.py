"""Convolution outputs that stay channels-last: which sites hand their output on as cuDNN made it
(conv_layout.py), the `_cl` builds of the kernels reading them (codegen/pointwise_cl.py, pool.py), and
those builds run on the CPU emulator against eager in both layouts, vector and scalar, with odd
channel counts, misaligned slices, and operands of strides no build was made for."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from emulator import GXX, emulated_model, force_conv_layout, write_problem
from helpers import kernels
from torchweld.tiling import channels_last_tile
from torchweld.plan.conv_layout import conv_layouts
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ not installed")


def _compile(rel: str):
    return compile_problem(load_problem(ROOT / "problems" / rel))


def _forward(src: str) -> str:
    return src[src.index("    def forward"):src.index("    def _tw_general")]


def test_glu_reads_the_conv_output_as_made():
    """GLU's two channel slices of a channels-last conv output go to k0's `_cl` build: no conversion
    back to NCHW in `_tw_conv`, no `_tw_layout` copy unless the strides are neither build's."""
    src = _compile("conv/conv2d_glu.py").source
    fwd = _forward(src)
    assert "_tw_conv(self, 0, x, p0, p1, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, to=None)" in fwd
    assert ".contiguous(" not in fwd and "_tw_layout" not in fwd
    wrapper = src[src.index("def _k0("):src.index("class ModelNew")]
    cl_test = "    cl = a_v5.stride() == (524288, 1, 8192, 128) and a_v4.stride() == (524288, 1, 8192, 128)\n"
    assert cl_test in wrapper
    assert wrapper.index("    if not cl:") < wrapper.index("_tw_layout(a_v5")  # the copy is the fallback only
    assert all(line.startswith("        ") for line in wrapper.splitlines() if "_tw_layout" in line)
    assert "err = _LIB.tw_launch_k0_cl(" in wrapper and "err = _LIB.tw_launch_k0(" in wrapper
    assert "_KERNEL_ARGS = {'k0': 4, 'k0_cl': 4}" in src  # 3 pointers and the runtime element count
    assert "k0_cl_v4<<<(unsigned)(n / 262144ull) * 256u, 256" in src and "k0_cl_v1<<<(unsigned)(n / 262144ull) * 256u, 256" in src
    assert "A channels-last result is read as made (no copy back to NCHW) by k0" in src


@pytest.mark.parametrize("rel", ["conv/conv2d_bias_residual_relu.py", "conv/conv3d_tanh_scale_bias.py",
                                 "conv_transpose/convt2d_silu_scale.py", "pool/conv2d_relu_maxpool.py",
                                 "lowp/conv2d_silu_bias_fp16.py", "conv/conv2d_resnet_downsample_shortcut.py"])
def test_epilogues_and_pools_take_either_layout(rel):
    result = _compile(rel)
    layouts = conv_layouts(result.plan)
    assert layouts.keep and all(", to=None)" in line for line in result.source.splitlines() if "= _tw_conv(self" in line)
    readers = [k for k in result.plan.kernels if layouts.of(k)]
    assert readers and all(f"tw_launch_{k.name}_cl(" in result.source for k in readers)


@pytest.mark.parametrize("rel", ["norm/conv2d_group_norm_silu.py", "reduce/conv2d_softmax_channels_scale.py",
                                 "seeds/seed002_convt3d.py"])
def test_sites_whose_readers_need_the_captured_layout_convert(rel):
    """A reduction or norm (no `_cl` build) or the model's output reads the conv: `_tw_conv` converts."""
    result = _compile(rel)
    assert not conv_layouts(result.plan).keep
    assert "to=None" not in result.source and "_cl(" not in result.source


def test_a_model_run_channels_last_needs_no_second_build():
    """Captured channels-last (the original runs it so): the conv's output is already what its
    readers were built for; it goes on as made, and no `_cl` build is needed."""
    result = _compile("pool/conv2d_channels_last_maxpool.py")
    layouts = conv_layouts(result.plan)
    assert layouts.keep and not layouts.channels_last
    assert ", to=None)" in result.source and "_cl(" not in result.source


def test_views_that_would_copy_and_outputs_keep_the_conversion():
    w = torch.randn(6, 3, 3, 3)
    flat = kernels(lambda m, x: torch.relu(F.conv2d(x, m.w).flatten(1)) * 2.0, torch.randn(2, 3, 8, 8), w=w)
    assert not conv_layouts(flat).keep  # flatten(1) of channels-last data is a copy, not a view
    returned = kernels(lambda m, x: (lambda y: (y, torch.relu(y)))(F.conv2d(x, m.w)), torch.randn(2, 3, 8, 8), w=w)
    assert not conv_layouts(returned).keep  # the model returns the conv's output itself: NCHW as eager's
    chunks = kernels(lambda m, x: (lambda a, b: a * torch.sigmoid(b))(*F.conv2d(x, m.w).chunk(2, dim=1)),
                     torch.randn(2, 3, 8, 8), w=w)
    layouts = conv_layouts(chunks)
    assert layouts.keep and set(layouts.channels_last.values()) == {(216, 1, 36, 6)}  # (2, 6, 6, 6) channels-last


def test_tiling_vector_widths():
    """16-byte loads along C where C and the strides divide by the width; 16-byte stores along the
    spatial positions where their count does; tiles sized to small channel counts."""
    def tile(c_out, hw, dtype=torch.float32, glu=True):
        x = torch.randn(2, 3, *hw, dtype=dtype)
        w = torch.randn(2 * c_out if glu else c_out, 3, 3, 3, dtype=dtype)
        fn = (lambda m, x: F.glu(F.conv2d(x, m.w), dim=1)) if glu else (lambda m, x: torch.relu(F.conv2d(x, m.w)))
        plan = kernels(fn, x, w=w)
        (k,) = plan.kernels
        return channels_last_tile(k, plan.graph, conv_layouts(plan).of(k))

    t = tile(12, (10, 10))
    assert (t.C, t.P, t.tc, t.tp, t.vl, t.vs) == (12, 64, 16, 64, 4, 4)
    t = tile(7, (11, 11))  # odd channels: scalar loads; 81 positions: scalar stores
    assert (t.vl, t.vs, t.tc) == (1, 1, 8)
    assert tile(40, (6, 6)).tc == 32
    assert (tile(16, (10, 10), torch.float16, glu=False).vl, tile(12, (10, 10), torch.float16, glu=False).vl) == (8, 1)


# --- on the CPU emulator -------------------------------------------------------------------------

def _glu_problem(tmp_path, out_channels: int, hw: int) -> Path:
    src = (ROOT / "problems" / "conv" / "conv2d_glu.py").read_text()
    for old, new in (("batch_size = 32", "batch_size = 2"), ("in_channels = 64", "in_channels = 5"),
                     ("out_channels = 64", f"out_channels = {out_channels}"), ("height = width = 64", f"height = width = {hw}")):
        assert old in src
        src = src.replace(old, new)
    return write_problem(tmp_path, f"glu_{out_channels}_{hw}", src)


MULTI = '''"""Convolutions with epilogues, in 2-d, 3-d and transposed, odd channel counts, and a pool."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 7, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 3, padding=1)
        self.c = nn.Conv3d(3, 6, 3, padding=1)
        self.d = nn.ConvTranspose2d(3, 4, 2, stride=2)
        self.e = nn.Conv2d(3, 5, 3, padding=1)
        self.scale = nn.Parameter(torch.rand(8, 1, 1) + 0.5)

    def forward(self, x, y, z):
        a = torch.relu(self.a(x))
        b = torch.tanh(self.b(x)) * self.scale + y
        c = F.gelu(self.c(z)) * 2.0
        d = torch.sigmoid(self.d(x)) - 0.5
        e = F.max_pool2d(F.relu(self.e(x)), 2)
        return a, b, c, d, e


def get_inputs():
    return [torch.randn(2, 3, 8, 6), torch.randn(2, 8, 8, 6), torch.randn(2, 3, 4, 5, 6)]


def get_init_inputs():
    return []
'''


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format={4: torch.channels_last, 5: torch.channels_last_3d}[t.dim()])


def _models(path: Path, tmp_path, vec: bool = True):
    """(the problem's namespace, the emulated ModelNew class, the compile result)."""
    new_cls, result = emulated_model(path, tmp_path, vec=vec)
    namespace: dict = {}
    exec(path.read_text(), namespace)
    return namespace, new_cls, result


def _run(models, inputs: list, channels_last: bool, cl_inputs: bool = False):
    """(eager outputs, ModelNew outputs, kernels launched), every conv site run channels-last or as
    the original runs it; `cl_inputs`: the 4-d/5-d inputs given channels-last."""
    namespace, new_cls, _ = models
    torch.manual_seed(0)
    ref = namespace["Model"](*namespace["get_init_inputs"]())
    new = new_cls(*namespace["get_init_inputs"]())
    new.load_state_dict(ref.state_dict())
    new._tw_general = _no_general_path
    force_conv_layout(new, channels_last)
    lib = type(new).forward.__globals__["_LIB"]
    lib.launched.clear()
    fed = [_channels_last(t) if cl_inputs and t.dim() >= 4 else t for t in inputs]
    with torch.no_grad():
        want = ref(*[t.clone() for t in fed])
        got = new(*[t.clone() for t in fed])
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    return want, got, list(lib.launched)


def _no_general_path(*args):
    raise AssertionError("the inputs took the general path: the kernels did not run")


def _check(want, got, same_strides: bool):
    for i, (w, g) in enumerate(zip(want, got)):
        assert g.shape == w.shape and torch.allclose(g, w, atol=1e-5, rtol=1e-5), (i, (g - w).abs().max())
        if same_strides:
            assert g.stride() == w.stride(), (i, g.stride(), w.stride())


@needs_gxx
@pytest.mark.parametrize("out_channels,hw", [(12, 8), (7, 9), (40, 6)])
@pytest.mark.parametrize("vec", [True, False])
def test_glu_on_the_emulator(tmp_path, out_channels, hw, vec):
    """conv2d_glu at small sizes: 12 channels (16-byte loads along C), 7 (scalar loads; the second
    slice starts 28 bytes in, so the vector flag is off), 40 (a full and a partial tile of 32
    channels, 36 positions over two tiles); the conv run NCHW or channels-last, the input contiguous
    or channels-last; values as eager's, the output NCHW-contiguous as eager's."""
    models = _models(_glu_problem(tmp_path, out_channels, hw), tmp_path, vec)
    torch.manual_seed(1)
    x = torch.randn(2, 5, hw, hw)
    for channels_last, cl_inputs, build in ((False, False, "k0"), (True, False, "k0_cl"),
                                  (False, True, "k0_cl"), (True, True, "k0_cl")):
        want, got, launched = _run(models, [x], channels_last, cl_inputs)
        assert launched == [build], (channels_last, cl_inputs, launched)
        _check(want, got, same_strides=not cl_inputs)


@needs_gxx
@pytest.mark.parametrize("vec", [True, False])
def test_epilogues_on_the_emulator(tmp_path, vec):
    """Five conv sites (odd channels, 3-d, transposed, a residual read NCHW, a max pool), each
    kernel's `_cl` build launched where its conv ran channels-last; values and strides as eager's."""
    models = _models(write_problem(tmp_path, "multi", MULTI), tmp_path, vec)
    torch.manual_seed(2)
    inputs = [torch.randn(2, 3, 8, 6), torch.randn(2, 8, 8, 6), torch.randn(2, 3, 4, 5, 6)]
    want, got, launched = _run(models, inputs, False)
    assert not any(k.endswith("_cl") for k in launched)
    _check(want, got, same_strides=True)
    plan = models[2].plan
    layouts = conv_layouts(plan)
    readers = {k.name for k in plan.kernels if layouts.of(k)}
    assert len(readers) == 5 and len(layouts.keep) == 5
    want, got, launched = _run(models, inputs, True)
    assert {k for k in launched if k.endswith("_cl")} == {f"{k}_cl" for k in readers}
    _check(want, got, same_strides=True)
    want, got, launched = _run(models, inputs, False, cl_inputs=True)
    assert {k for k in launched if k.endswith("_cl")} == {f"{k}_cl" for k in readers}
    _check(want, got, same_strides=False)


@needs_gxx
def test_no_copy_of_the_conv_output(tmp_path):
    """With the conv run channels-last, nothing copies its output or the slices of it: the only
    copies are cuDNN's input and weight conversions (the weight once per version)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.shapes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.__name__.split(".")[0] in ("copy_", "clone", "_to_copy", "contiguous"):
                self.shapes.append(tuple(out.shape))
            return out

    path = _glu_problem(tmp_path, 12, 8)
    new_cls, _ = emulated_model(path, tmp_path)
    new = new_cls(5, 12, 3)
    force_conv_layout(new, True)
    x = torch.randn(2, 5, 8, 8)
    with torch.no_grad():
        new(x)  # the weight is converted at the first call
        with Copies() as mode:
            new(x)
    assert mode.shapes == [(2, 5, 8, 8)], mode.shapes  # the input, for cuDNN; not the (2, 24, 8, 8) output


@needs_gxx
def test_other_strides_take_the_general_build(tmp_path):
    """Operands whose strides are neither the captured nor the channels-last ones (a permuted
    layout, a strided slice) are laid out as captured and go to the flat build."""
    path = _glu_problem(tmp_path, 12, 8)
    new_cls, _ = emulated_model(path, tmp_path)
    module = type(new_cls(5, 12, 3)).forward.__globals__
    torch.manual_seed(3)
    base = torch.randn(2, 8, 24, 8).permute(0, 2, 1, 3)  # (2, 24, 8, 8), H outermost after N
    wide = torch.randn(2, 24, 8, 16)[..., ::2]  # every other column: not dense
    for v in (base, wide, _channels_last(torch.randn(2, 24, 8, 8))):
        module["_LIB"].launched.clear()
        (got,) = module["_k0"](v[:, 12:], v[:, :12])
        assert torch.allclose(got, F.glu(v, dim=1), atol=1e-6) and got.is_contiguous()
        assert module["_LIB"].launched == (["k0_cl"] if v.is_contiguous(memory_format=torch.channels_last) else ["k0"])


BF16 = '''"""A bf16 conv with an epilogue."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 2.0


def get_inputs():
    return [torch.randn(2, 3, 8, 6, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
'''


@needs_gxx
def test_bf16_epilogue_on_the_emulator(tmp_path):
    """bf16: 8 elements a 16-byte access; 16 channels load 8 at a time along C, 48 positions store 8."""
    models = _models(write_problem(tmp_path, "bf16", BF16), tmp_path)
    plan = models[2].plan
    (k,) = plan.kernels
    t = channels_last_tile(k, plan.graph, conv_layouts(plan).of(k))
    assert (t.vl, t.vs) == (8, 8)
    torch.manual_seed(4)
    x = torch.randn(2, 3, 8, 6, dtype=torch.bfloat16)
    for fmt in (False, True):
        want, got, launched = _run(models, [x], fmt)
        assert launched == (["k0_cl"] if fmt else ["k0"])
        assert torch.allclose(got[0].float(), want[0].float(), atol=2e-2, rtol=2e-2)
        assert got[0].stride() == want[0].stride()
