"""The emitted ModelNew with our convolution (`--conv-ours`) run on the CPU: its `_<k>_ours` wrappers
launch the sites built against tests/gemm_emu.h, aligned and not, on small problems of every
convolution class (2-d with a folded batch norm and residual, transposed with output padding,
grouped 1-d, 3-d, fp16, a lone convolution), against eager; its `_<k>_library` ways too (as given
and channels-last)."""
from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import pytest
import torch

from conv_harness import build_emu
from emulator import one_input_problem, poisoned_torch, reference_and_new, write_problem
from helpers import sweep_ways
from torchweld.codegen.conv_kernel import spec
from torchweld.options import Options
from torchweld.pipeline import compile_problem
from torchweld.plan.conv_ours import OursConv
from torchweld.problem import load_module, load_problem

PROBLEMS = {
    "c2_bn_res_relu": ("torch.relu(self.bn(self.conv(x)) + x)",
                       "self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False); self.bn = torch.nn.BatchNorm2d(8); "
                       "self.bn.running_mean.normal_(); self.bn.running_var.uniform_(0.5, 2.0); self.eval()",
                       "torch.randn(2, 8, 7, 9),"),
    "t2_op_clamp": ("torch.clamp(self.conv(x), -0.5, 0.5) * 2.0",
                    "self.conv = torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2)",
                    "torch.randn(2, 6, 5, 4),"),
    "c1_grouped_silu": ("torch.nn.functional.silu(self.conv(x)) + self.b",
                        "self.conv = torch.nn.Conv1d(12, 6, 5, padding=2, dilation=2, groups=3); "
                        "self.b = torch.nn.Parameter(torch.randn(6, 1))",
                        "torch.randn(2, 12, 19),"),
    "c3_stride_tanh": ("torch.tanh(self.conv(x)) * 0.5",
                       "self.conv = torch.nn.Conv3d(4, 8, 3, stride=2, padding=1)", "torch.randn(1, 4, 5, 6, 7),"),
    "c2_f16_relu": ("torch.relu(self.conv(x))", "self.conv = torch.nn.Conv2d(16, 24, 3, padding=1).half()",
                    "torch.randn(2, 16, 6, 6).half(),"),
    "c2_alone": ("self.conv(x)", "self.conv = torch.nn.Conv2d(5, 7, 2, stride=2)", "torch.randn(2, 5, 9, 8),"),
    "t2_stride_gt_kernel": ("torch.sigmoid(self.conv(x))", "self.conv = torch.nn.ConvTranspose2d(8, 8, 2, stride=3)",
                            "torch.randn(2, 8, 4, 5),"),
    "c2_relu_maxpool": ("torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)",
                        "self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)", "torch.randn(2, 8, 7, 9),"),
    "c2_avgpool_gain": ("torch.nn.functional.avg_pool2d(torch.relu(self.conv(x) + x), (2, 4)) * self.g",
                        "self.conv = torch.nn.Conv2d(8, 8, 3, padding=1); self.g = torch.nn.Parameter(torch.randn(8, 1, 1))",
                        "torch.randn(2, 8, 8, 8),"),
    "c1_maxpool4": ("torch.nn.functional.max_pool1d(torch.tanh(self.conv(x)), 4)",
                    "self.conv = torch.nn.Conv1d(8, 16, 5, padding=2)", "torch.randn(2, 8, 37),"),
    "resnet_basic_block": ("torch.relu(self.bn2(self.c2(torch.relu(self.bn1(self.c1(x))))) + x)",
                           "self.c1 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False); self.bn1 = torch.nn.BatchNorm2d(16); "
                           "self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False); self.bn2 = torch.nn.BatchNorm2d(16); "
                           "self.bn1.running_var.uniform_(0.5, 2.0); self.bn2.running_mean.normal_(); self.eval()",
                           "torch.randn(2, 16, 6, 7),"),
}


def _problem(tmp: Path, name: str) -> Path:
    body, init, inputs = PROBLEMS[name]
    return one_input_problem(tmp, name, body, init, inputs)


class _Lib:
    """The emitted file's `_LIB` for its convolution sites: the emulated launchers, pointers passed as ints."""

    def __init__(self, so, kernels: dict[str, int], vec: bool):
        so.tw_error_string.argtypes, so.tw_error_string.restype = [ctypes.c_int], ctypes.c_char_p
        self.tw_error_string, self.launched = so.tw_error_string, []
        for k, n in kernels.items():
            fn = getattr(so, f"tw_launch_{k}")
            fn.argtypes, fn.restype = [ctypes.c_void_p] * n + [ctypes.c_int, ctypes.c_void_p], ctypes.c_int
            setattr(self, f"tw_launch_{k}", self._launch(k, fn, vec))
            setattr(self, f"tw_conv_path_{k}", getattr(so, f"tw_conv_path_{k}"))

    def _launch(self, k, fn, vec):
        def launch(*args):
            self.launched.append(k)
            return fn(*args[:-2], args[-2] if vec else 0, None)
        return launch


def _emulated(result, tmp: Path, cc: int, vec: bool, way):
    """ModelNew of `result` with `_LIB` the emulated sites, every site run `way` ("ours", or a memory format)."""
    sites = [s for s in result.plan.conv_ours.values() if isinstance(s, OursConv)]
    assert sites and all(k.kind == "conv" for k in result.plan.kernels)  # nothing else to emulate here
    prims = (Path(__file__).parents[1] / "torchweld" / "codegen" / "cuh" / "prelude.cuh").read_text()
    helpers = "\n".join(l for l in prims.splitlines() if re.match(r"template <typename T> __device__ __forceinline__ T tw_m(ax|in)", l))
    so = build_emu([spec(s, result.plan.graph) for s in sites], tmp, cc=cc, head='#include "gemm_emu.h"\n' + helpers + "\n")
    src = result.source.replace("_LIB = _tw_build() if torch.cuda.is_available() else None", "_LIB = None")
    src = re.sub(r" or not \w+\.is_cuda", "", src)
    src = re.sub(r" or \w+\.get_device\(\) != torch\.cuda\.current_device\(\)", "", src)
    path = tmp / f"{result.problem.path.stem}_{cc}_{vec}_{way}.py"
    path.write_text(src)
    module = load_module(path, src, prefix="tw_conv_emu")
    module._LIB = _Lib(so, module._KERNEL_ARGS, vec)
    module._tw_stream = lambda dev: None
    module._tw_convk = lambda m, site, ours, library, *args: (ours(m, *args) if way == "ours"
                                                              else library(m, None if way == "cudnn" else way, *args))
    module.torch = poisoned_torch()
    return module.ModelNew


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_emitted_conv_matches_eager_on_the_emulator":
        sweep_ways(metafunc, "name, cc, vec", list(PROBLEMS), [(90, True), (80, True), (80, False)], list(PROBLEMS))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_emitted_conv_matches_eager_on_the_emulator(tmp_path, name, cc, vec):
    path = _problem(tmp_path, name)
    result = compile_problem(load_problem(path), Options(conv_ours=True))
    sites = result.plan.conv_ours.values()
    assert all(isinstance(s, OursConv) and bool(s.folded) != (name == "c2_alone") for s in sites), list(sites)
    assert all(bool(s.pool) == ("pool" in name) for s in sites)
    torch.manual_seed(1)
    inputs = eval(f"[{PROBLEMS[name][2]}]", {"torch": torch})
    fmts = ["ours", "cudnn"] + ([{4: torch.channels_last, 5: torch.channels_last_3d}[inputs[0].dim()]]
                                if inputs[0].dim() in (4, 5) and inputs[0].dtype == torch.float32 else [])
    for way in fmts:
        ref, new = reference_and_new(path, _emulated(result, tmp_path, cc, vec, way))
        with torch.no_grad():
            want, got = ref(*inputs), new(*inputs)
        launched = set(type(new).forward.__globals__["_LIB"].launched)
        assert launched == ({s.kernel.name for s in sites} if way == "ours" else set()), way
        assert got.shape == want.shape and not got.isnan().any(), way
        tol = 1e-4 if want.dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m: f"{way}: {m}")
        if way == "ours":  # the loop the device's path names ran
            lib = type(new).forward.__globals__["_LIB"]
            for s in sites:
                assert getattr(lib, f"tw_conv_path_{s.kernel.name}")() == (90 if cc == 90 and "wgmma" in s.how else 80)


# The seed problems as written, their size constants made small: their convolutions
# (two transposed, phase-ordered where the stride allows) with their epilogues, through the emitted file.
SEED_SIZES = {
    "seed000_convt3d_bias_residual": {"batch_size": "2", "out_channels": "16", "depth, height, width": "2, 3, 4"},
    "seed001_conv2d_relu_bias": {"batch_size": "2", "in_channels": "8", "out_channels": "24", "height = width": "6"},
    "seed002_convt3d": {"batch_size": "2", "in_channels": "8", "out_channels": "8", "depth = height = width": "4"},
    "seed004_convt2d_bias_clamp_scale": {"batch_size": "2", "out_channels": "16", "height = width": "5"},
}


def _small_seed(tmp: Path, name: str) -> Path:
    src = (Path(__file__).resolve().parents[1] / "problems" / "seeds" / f"{name}.py").read_text()
    for lhs, value in SEED_SIZES[name].items():
        src, n = re.subn(rf"^{re.escape(lhs)} = .*$", f"{lhs} = {value}", src, flags=re.M)
        assert n == 1, lhs
    return write_problem(tmp, name, src)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.parametrize("name", list(SEED_SIZES))
def test_seed_problems_small_match_eager_on_the_emulator(tmp_path, name, request):
    """NOTE: each seed on one path by default, in turn (CI's time budget); both under --full-sweep."""
    path = _small_seed(tmp_path, name)
    problem = load_problem(path)
    result = compile_problem(problem, Options(conv_ours=True))
    sites = [s for s in result.plan.conv_ours.values() if isinstance(s, OursConv)]
    assert len(sites) == 1
    if name in ("seed000_convt3d_bias_residual", "seed004_convt2d_bias_clamp_scale"):
        assert "phase-ordered" in sites[0].how
    turn = list(SEED_SIZES).index(name) % 2
    for cc in (90, 80) if request.config.getoption("--full-sweep") else ((90, 80)[turn],):
        new_cls = _emulated(result, tmp_path, cc, True, "ours")
        namespace: dict = {}
        exec(path.read_text(), namespace)
        torch.manual_seed(0)
        ref = namespace["Model"](*problem.init_inputs())
        new = new_cls(*problem.init_inputs())
        new.load_state_dict(ref.state_dict())
        torch.manual_seed(1)
        inputs = problem.inputs()
        with torch.no_grad():
            want, got = ref(*inputs), new(*inputs)
        assert type(new).forward.__globals__["_LIB"].launched == [sites[0].kernel.name]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
