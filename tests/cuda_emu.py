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
    if not vec:
        src = re.sub(r", int\(\w+\.data_ptr\(\) % .*\), _tw_stream\(dev\)\)\)", ", 0, _tw_stream(dev)))", src)
    src = src.replace("_LIB = _tw_build() if torch.cuda.is_available() else None", "_LIB = None")
    src = re.sub(r" or not \w+\.is_cuda", "", src)
    src = re.sub(r" or \w+\.get_device\(\) != torch\.cuda\.current_device\(\)", "", src)
    src = src.replace('if dev.type == "cuda" and dev.index != torch.cuda.current_device():', "if False:")
    workdir = Path(workdir or tempfile.mkdtemp())
    path = workdir / f"{problem_path.stem}_emu.py"
    path.write_text(src)
    module = load_module(path, src, prefix="tw_emu")
    lib = build(module._CUDA_SRC, workdir)
    for kernel, n_ptrs in module._KERNEL_ARGS.items():
        fn = getattr(lib, "tw_launch_" + kernel)
        fn.argtypes = [ctypes.c_void_p] * n_ptrs + [ctypes.c_int, ctypes.c_void_p]
        fn.restype = ctypes.c_int
    module._LIB = lib
    module._tw_stream = lambda dev: None
    return module.ModelNew, result


def write_problem(tmp: Path, name: str, body: str) -> Path:
    path = tmp / f"{name}.py"
    path.write_text(body)
    return path
