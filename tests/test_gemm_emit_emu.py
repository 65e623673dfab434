"""The emitted ModelNew with our GEMM (`--gemm`) run on the CPU: its `_<k>_ours` wrappers launch the sites
built against tests/gemm_emu.h (mma.sync, wgmma, TMA emulated), both main loops, aligned and not, on
problems of odd sizes, against eager; its `_<k>_library` ways too."""
from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from emulator import poisoned_torch, reference_and_new, write_problem
from gemm_harness import GXX_FLAGS
from helpers import sweep_ways
from torchweld.codegen.gemm_kernel import spec
from torchweld.codegen.gemm_source import gemm_source
from torchweld.options import Options
from torchweld.pipeline import compile_problem
from torchweld.plan.gemm_ours import OursGemm
from torchweld.problem import load_module, load_problem

PROBLEMS = {
    "odd_linear_gelu": ("torch.nn.functional.gelu(self.fc(x), approximate='tanh') * 0.5 + x2",
                        "self.fc = torch.nn.Linear(45, 29)", "torch.randn(37, 45), torch.randn(37, 29)"),
    "odd_bmm_t_relu": ("torch.relu(torch.bmm(a, b.transpose(1, 2))) * 0.125",
                       "pass", "torch.randn(3, 33, 27), torch.randn(3, 41, 27)"),
    "odd_addmm_sigmoid": ("torch.sigmoid(torch.addmm(self.b, x, self.w, beta=0.5, alpha=2.0))",
                          "self.w = torch.nn.Parameter(torch.randn(31, 23)); self.b = torch.nn.Parameter(torch.randn(23))",
                          "torch.randn(19, 31),"),
    # 16-byte aligned strides: the wgmma loop on cc 9.0 (TMA, converter), the cp.async one on 8.0
    "aligned_linear_relu": ("torch.relu(self.fc(x))", "self.fc = torch.nn.Linear(64, 40)", "torch.randn(37, 64),"),
    "aligned_bmm_f16": ("torch.relu(torch.bmm(a, b)) + 1.0", "pass",
                        "torch.randn(2, 24, 32).half(), torch.randn(2, 32, 40).half()"),
    "odd_row_scale": ("torch.relu(torch.mm(x, self.w)) * self.s.view(-1, 1)",
                      "self.w = torch.nn.Parameter(torch.randn(26, 18)); self.s = torch.nn.Parameter(torch.randn(21))",
                      "torch.randn(21, 26),"),
    "odd_self_mm": ("torch.mm(x, x)", "pass", "torch.randn(23, 23),"),  # ours alone, one operand twice
}
ARGS = {"odd_self_mm": "x", "odd_row_scale": "x", "odd_linear_gelu": "x, x2", "odd_bmm_t_relu": "a, b", "odd_addmm_sigmoid": "x", "aligned_linear_relu": "x",
        "aligned_bmm_f16": "a, b"}


def _problem(tmp: Path, name: str) -> Path:
    body, init, inputs = PROBLEMS[name]
    return write_problem(tmp, name, f"""import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, {ARGS[name]}):
        return {body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
""")


class _Lib:
    """The emitted file's `_LIB` for its GEMM sites: the emulated launchers, pointers passed as ints."""

    def __init__(self, so, kernels: dict[str, int], vec: bool):
        so.tw_error_string.argtypes, so.tw_error_string.restype = [ctypes.c_int], ctypes.c_char_p
        self.tw_error_string, self.launched = so.tw_error_string, []
        for k, n in kernels.items():
            fn = getattr(so, f"tw_launch_{k}")
            fn.argtypes, fn.restype = [ctypes.c_void_p] * n + [ctypes.c_int, ctypes.c_void_p], ctypes.c_int
            setattr(self, f"tw_launch_{k}", self._launch(k, fn, vec))
            setattr(self, f"tw_gemm_path_{k}", getattr(so, f"tw_gemm_path_{k}"))


    def _launch(self, k, fn, vec):
        def launch(*args):
            self.launched.append(k)
            return fn(*args[:-2], args[-2] if vec else 0, None)
        return launch


def _build(specs, tmp: Path, cc: int, head: str):
    """gemm_harness.build_emu's build, with `head` (the file prelude's helpers the epilogues call) first."""
    src = head + gemm_source(specs, emu=True) + '#include "gemm_emu_check.h"\n'
    key = hashlib.sha256(src.encode()).hexdigest()[:16]
    lib = tmp / f"emu_{key}_cc{cc}.so"
    if not lib.exists():
        cc_path = lib.with_suffix(".cc")
        cc_path.write_text(src)
        proc = subprocess.run([shutil.which("g++"), *GXX_FLAGS, str(cc_path), "-o", str(lib)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
    so = ctypes.CDLL(str(lib))
    so.twg_emu_config.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint]
    so.twg_emu_config(cc, 0, 1)
    return so


def _emulated(result, tmp: Path, cc: int, vec: bool, way: str):
    """ModelNew of `result` with `_LIB` the emulated sites, every site run `way` ("ours" or "library")."""
    sites = [s for s in result.plan.gemm_ours.values() if isinstance(s, OursGemm)]
    assert sites and all(k.kind == "gemm" for k in result.plan.kernels)  # nothing else to emulate here
    prims = (Path(__file__).parents[1] / "torchweld" / "codegen" / "cuh" / "prelude.cuh").read_text()
    helpers = "\n".join(l for l in prims.splitlines() if re.match(r"template <typename T> __device__ __forceinline__ T tw_m(ax|in)", l))
    assert helpers.count("tw_m") == 2
    so = _build([spec(s, result.plan.graph) for s in sites], tmp, cc, '#include "gemm_emu.h"\n' + helpers + "\n")
    src = result.source.replace("_LIB = _tw_build() if torch.cuda.is_available() else None", "_LIB = None")
    src = re.sub(r" or not \w+\.is_cuda", "", src)
    src = re.sub(r" or \w+\.get_device\(\) != torch\.cuda\.current_device\(\)", "", src)
    path = tmp / f"{result.problem.path.stem}_{cc}_{vec}_{way}.py"
    path.write_text(src)
    module = load_module(path, src, prefix="tw_gemm_emu")
    module._LIB = _Lib(so, module._KERNEL_ARGS, vec)
    module._tw_stream = lambda dev: None
    module._tw_gemm = lambda m, site, ours, library, *args: (ours if way == "ours" else library)(*args)
    module.torch = poisoned_torch()
    return module.ModelNew


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_emitted_gemm_matches_eager_on_the_emulator":
        sweep_ways(metafunc, "name, cc, vec", list(PROBLEMS), [(90, True), (80, True), (80, False)], list(PROBLEMS))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_emitted_gemm_matches_eager_on_the_emulator(tmp_path, name, cc, vec):
    path = _problem(tmp_path, name)
    result = compile_problem(load_problem(path), Options(gemm=True))
    assert all(isinstance(s, OursGemm) and bool(s.folded) != (name == "odd_self_mm")
               for s in result.plan.gemm_ours.values())
    for way in ("ours", "library"):
        ref, new = reference_and_new(path, _emulated(result, tmp_path, cc, vec, way))
        torch.manual_seed(1)
        inputs = [x for x in eval(f"[{PROBLEMS[name][2]}]", {"torch": torch})]
        with torch.no_grad():  # NOTE: with grad mode on, forward's guard runs the original forward
            want, got = ref(*inputs), new(*inputs)
        sites = {s.kernel.name for s in result.plan.gemm_ours.values()}
        launched = set(type(new).forward.__globals__["_LIB"].launched)
        assert launched == (sites if way == "ours" else set()), way
        assert got.shape == want.shape and not got.isnan().any(), way
        tol = 1e-4 if want.dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m: f"{way}: {m}")
        if way == "ours" and name.startswith("aligned"):  # the loop the device's path names ran
            lib = type(new).forward.__globals__["_LIB"]
            assert {getattr(lib, f"tw_gemm_path_{k}")() for k in sites} == {cc}
