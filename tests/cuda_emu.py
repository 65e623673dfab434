"""Run an emitted ModelNew on the CPU: its CUDA source built by g++ against tests/emu/ (CUDA
emulated with one std::thread per GPU thread), its wrappers fed CPU tensors. Slow, exact enough
to check the kernels' index math, block reductions and NaN/inf rules without a GPU."""
from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

EMU = Path(__file__).parent / "emu"
GXX = shutil.which("g++")
_LAUNCH = re.compile(r"(\w+(?:<\d+>)?)<<<([^,]+), ([^,]+), 0, [^>]+>>>\((.*)\);")


def emu_source(cuda: str) -> str:
    """The CUDA source with each `k<<<blocks, threads, 0, stream>>>(args)` as an emulated launch."""
    return _LAUNCH.sub(lambda m: f"tw_emu_launch({m[2]}, {m[3]}, [&] {{ {m[1]}({m[4]}); }});", cuda)


def build(cuda: str, out: Path) -> ctypes.CDLL:
    src = emu_source(cuda)
    lib = out / f"emu_{hashlib.sha256(src.encode()).hexdigest()[:16]}.so"
    if not lib.exists():
        cu = lib.with_suffix(".cc")
        cu.write_text(src)
        proc = subprocess.run([GXX, "-std=c++20", "-O1", "-fno-strict-aliasing", "-shared", "-fPIC", "-pthread",
                               "-w", f"-I{EMU}", str(cu), "-o", str(lib)], capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"g++ failed on {cu}:\n{proc.stderr[-3000:]}")
    return ctypes.CDLL(str(lib))


def emulated_model(problem_path: Path, workdir: Path | None = None, vec: bool = True):
    """(ModelNew class running on the emulator, the compile result); vec=False: the scalar builds."""
    result = compile_problem(load_problem(problem_path))
    src = result.source
    src = src.replace("_LIB = _tw_build() if torch.cuda.is_available() else None", "_LIB = None")
    src = re.sub(r" or not \w+\.is_cuda", "", src)
    src = re.sub(r" or \w+\.get_device\(\) != torch\.cuda\.current_device\(\)", "", src)
    src = src.replace('if dev.type == "cuda" and dev.index != torch.cuda.current_device():', "if False:")
    workdir = Path(workdir or tempfile.mkdtemp())
    path = workdir / f"{problem_path.stem}_emu.py"
    path.write_text(src)
    module = load_module(path, src, prefix="tw_emu")
    lib = build(module._CUDA_SRC, workdir)
    module._LIB = _Launchers(lib, module._KERNEL_ARGS, vec)
    module._tw_stream = lambda dev: None
    return module.ModelNew, result


class _Launchers:
    """The emulated library as the emitted file calls it; records each launch by kernel name in
    `launched`, and with vec=False passes 0 as every launch's vector flag (the scalar builds)."""

    def __init__(self, lib: ctypes.CDLL, kernels: dict[str, int], vec: bool):
        lib.tw_error_string.argtypes, lib.tw_error_string.restype = [ctypes.c_int], ctypes.c_char_p
        self.tw_error_string, self.launched = lib.tw_error_string, []
        for kernel, n_ptrs in kernels.items():
            fn = getattr(lib, "tw_launch_" + kernel)
            fn.argtypes = [ctypes.c_void_p] * n_ptrs + [ctypes.c_int, ctypes.c_void_p]
            fn.restype = ctypes.c_int
            setattr(self, "tw_launch_" + kernel, self._recorded(kernel, fn, vec))

    def _recorded(self, kernel, fn, vec):
        def launch(*args):
            self.launched.append(kernel)
            return fn(*args[:-2], args[-2] if vec else 0, args[-1])
        return launch


def force_conv_layout(model, channels_last: bool) -> None:
    """Make every `_tw_conv` site of an emulated ModelNew run channels-last (channels_last_3d for a
    3-d convolution), or as the original does, without measuring (which needs a GPU)."""
    def pick(x, w, args, fmt, to):
        return ((fmt if channels_last else None), False), []

    type(model).forward.__globals__["_tw_pick"] = pick
    model.__dict__.pop("_tw_conv_plans", None)


def write_problem(tmp: Path, name: str, body: str) -> Path:
    path = tmp / f"{name}.py"
    path.write_text(body)
    return path


def reference_and_new(problem_path: Path, new_cls, seed: int = 0):
    """(the problem's Model, new_cls() holding its weights), both built after torch.manual_seed(seed)."""
    namespace: dict = {}
    exec(problem_path.read_text(), namespace)
    torch.manual_seed(seed)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    return ref, new
