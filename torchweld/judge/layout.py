"""Build-only judging, step 2: a recorded extension's files, laid out as load_inline writes them, and the
compiler commands torch's build would run on them, with where each written line came from."""
from __future__ import annotations

import os
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch.utils.cpp_extension as cpp_extension

from torchweld.judge.record import Extension

# NOTE: torch's build compiles for the GPU it finds; with none, for the GPUs the judge is run on (Hopper).
ARCH = ("-gencode=arch=compute_90,code=sm_90",)
_CUDA_HEAD = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")
_BIND_HEAD, _BIND_TAIL = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {", "}"


@dataclass(frozen=True)
class Unit:
    """One file to compile: load_inline's main.cpp or cuda.cu (written here), or one of load()'s own files.

    `origins[i]` says where line i + 1 came from: ("cpp_sources" | "cuda_sources", piece, line in piece),
    ("functions", name) for a binding load_inline writes, or None for a line it adds (an #include)."""

    name: str  # as compiler messages name it
    path: Path
    cuda: bool
    origins: tuple = ()

    def origin(self, line: int):
        return self.origins[line - 1] if 0 < line <= len(self.origins) else None


def _join(head: tuple[str, ...], kind: str, pieces: tuple[str, ...], tail: list[str], tail_origins: list):
    """The lines load_inline writes: its own head, each piece (joined by newlines), its own tail."""
    lines, origins = list(head), [None] * len(head)
    for i, piece in enumerate(pieces):
        for k, text in enumerate(piece.split("\n")):
            lines.append(text)
            origins.append((kind, i, k))
    return "\n".join(lines + tail), tuple(origins + tail_origins)


def write_units(ext: Extension, folder: Path) -> list[Unit]:
    """Write main.cpp and cuda.cu into `folder` as load_inline does; load()'s files are used where they are."""
    if ext.kind == "load":
        return [Unit(Path(f).name, Path(f), f.endswith((".cu", ".cuh")), ()) for f in ext.files]
    folder.mkdir(parents=True, exist_ok=True)
    tail, tail_origins = [], []
    if ext.functions is not None:
        tail = [_BIND_HEAD] + [f'm.def("{n}", torch::wrap_pybind_function({n}), "{doc}");' if ext.error_handling
                               else f'm.def("{n}", {n}, "{doc}");' for n, doc in ext.functions] + [_BIND_TAIL]
        tail_origins = [None] + [("functions", n) for n, _ in ext.functions] + [None]
    head = ("#include <torch/extension.h>",) if ext.implicit_headers else ()
    text, origins = _join(head, "cpp_sources", ext.cpp_sources, tail, tail_origins)
    (folder / "main.cpp").write_text(text)
    units = [Unit("main.cpp", folder / "main.cpp", False, origins)]
    if ext.cuda_sources:
        text, origins = _join(_CUDA_HEAD if ext.implicit_headers else (), "cuda_sources", ext.cuda_sources, [], [])
        (folder / "cuda.cu").write_text(text)
        units.append(Unit("cuda.cu", folder / "cuda.cu", True, origins))
    return units


def cuda_home() -> Path | None:
    """Where the CUDA toolkit is, found as torch finds it (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    nvcc = shutil.which("nvcc")
    homes = ([Path(os.path.realpath(nvcc)).parent.parent] if nvcc else []) + [Path("/usr/local/cuda")]
    # NOTE: nvcc on PATH may be a wrapper script, so a home must hold the headers too.
    return next((h for h in homes if (h / "bin" / "nvcc").is_file() and (h / "include" / "cuda.h").is_file()), None)


def nvcc_path() -> str | None:
    home = cuda_home()
    return str(home / "bin" / "nvcc") if home and (home / "bin" / "nvcc").is_file() else shutil.which("nvcc")


def cxx_path() -> str | None:
    return shutil.which(os.environ.get("CXX", "c++"))


def command(ext: Extension, unit: Unit, obj: Path) -> list[str] | None:
    """The compiler command torch's build would run for `unit` (None: its compiler is not installed)."""
    includes = [f"-I{os.path.abspath(p)}" for p in ext.extra_include_paths]
    system = list(cpp_extension.include_paths())
    home = cuda_home()
    if ext.cuda and home is not None and str(home / "include") != "/usr/include":
        system.append(str(home / "include"))
    python = sysconfig.get_path("include", scheme="posix_prefix")
    system += [python] if python else []
    common = [f"-DTORCH_EXTENSION_NAME={ext.name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *includes]
    common += [flag for path in system for flag in ("-isystem", path)]
    if not unit.cuda:
        cxx = cxx_path()
        # -O0 last: checking needs no optimised code, and the last -O wins.
        return [cxx, *common, "-fPIC", "-std=c++20", *ext.extra_cflags, "-O0", "-c", str(unit.path), "-o", str(obj)] \
            if cxx else None
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    flags = [*common, *cpp_extension.COMMON_NVCC_FLAGS]
    if not any("arch" in f for f in ext.extra_cuda_cflags):  # as torch decides: its own arch flags, or ours
        flags += ARCH
    flags += ["--compiler-options", "-fPIC", *ext.extra_cuda_cflags]
    if not any(f.startswith("-std=") for f in flags):
        flags.append("-std=c++20")
    cc = ["-ccbin", os.environ["CC"]] if os.environ.get("CC") else []
    return [nvcc, *cc, *flags, "-c", str(unit.path), "-o", str(obj)]
