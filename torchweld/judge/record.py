"""Build-only judging, step 1: import the candidate with `load_inline` and `load` recorded instead of run.

Each call is kept as an `Extension` with its arguments as they were at the call (offline.py compiles
it as load_inline would); it returns a stand-in module whose functions refuse to run. So the import
needs no GPU, and no extension is built or loaded into the process.
"""
from __future__ import annotations

import inspect
import os
import re
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch.utils.cpp_extension as cpp_extension

from torchweld.judge.build import BuildError, import_candidate

# Messages of the errors that only say this machine has no GPU (a CPU build of PyTorch, or no driver).
_NO_GPU = re.compile(r"not compiled with CUDA|requires CUDA support|torch\._C.* attribute '_cuda|NVIDIA driver|"
                     r"no CUDA GPUs|CUDA driver|CUDA-capable device|CUDA_HOME|libcuda|No module named .?triton", re.I)


@dataclass(frozen=True)
class Extension:
    """One `load_inline(...)` or `load(...)` call, with its arguments as they were at the call."""

    kind: str  # load_inline | load
    name: str
    line: int | None  # the candidate's line that made the call
    cpp_sources: tuple[str, ...] = ()
    cuda_sources: tuple[str, ...] = ()
    functions: tuple[tuple[str, str], ...] | None = None  # (name, docstring) pairs, as load_inline binds them
    files: tuple[str, ...] = ()  # load(): its source files, absolute
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_include_paths: tuple[str, ...] = ()
    with_cuda: bool | None = None
    error_handling: bool = True  # load_inline's with_pytorch_error_handling
    implicit_headers: bool = True  # not load_inline's no_implicit_headers

    @property
    def cuda(self) -> bool:
        """Whether torch would build it with CUDA (its headers and nvcc)."""
        if self.with_cuda is not None:
            return bool(self.with_cuda)
        return bool(self.cuda_sources) or any(f.endswith((".cu", ".cuh")) for f in self.files)


@dataclass(frozen=True)
class Imported:
    """What importing the candidate left: the module (None when it failed), the calls, the failure."""

    module: types.ModuleType | None
    extensions: tuple[Extension, ...]
    error: BuildError | None
    seconds: float


class Unbuilt(types.ModuleType):
    """What a recorded call returns: any function taken from it refuses to run (nothing was built)."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def unbuilt(*args, **kwargs):
            raise RuntimeError(f"{self.__name__}.{attr}: not built (build-only judging runs no extension code)")

        unbuilt.__name__ = attr
        return unbuilt


def _strings(value) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _functions(value) -> tuple[tuple[str, str], ...] | None:
    """load_inline's `functions=`: a name, a list of names, or a dict of name -> docstring."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, dict):
        return tuple((str(k), str(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple((str(f), str(f)) for f in value)
    raise ValueError(f"Expected 'functions' to be a list or dict, but was {type(value)}")


def _caller_line(path: str) -> int | None:
    """The candidate's line in the call stack (the call may sit in a helper or in ModelNew.__init__)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == path:
            return frame.f_lineno
        frame = frame.f_back
    return None


@contextmanager
def recording(path: Path, into: list[Extension]):
    """While inside, `torch.utils.cpp_extension.load_inline` and `.load` append to `into` and build nothing."""
    real_inline, real_load = cpp_extension.load_inline, cpp_extension.load

    def load_inline(*args, **kwargs):
        a = inspect.signature(real_inline).bind(*args, **kwargs).arguments
        into.append(Extension(
            "load_inline", str(a["name"]), _caller_line(str(path)), _strings(a.get("cpp_sources")),
            _strings(a.get("cuda_sources")), _functions(a.get("functions")), (), _strings(a.get("extra_cflags")),
            _strings(a.get("extra_cuda_cflags")), _strings(a.get("extra_include_paths")), a.get("with_cuda"),
            bool(a.get("with_pytorch_error_handling", True)), not a.get("no_implicit_headers", False)))
        return Unbuilt(str(a["name"]))

    def load(*args, **kwargs):
        a = inspect.signature(real_load).bind(*args, **kwargs).arguments
        into.append(Extension(
            "load", str(a["name"]), _caller_line(str(path)),
            files=tuple(os.path.abspath(f) for f in _strings(a.get("sources"))),
            extra_cflags=_strings(a.get("extra_cflags")), extra_cuda_cflags=_strings(a.get("extra_cuda_cflags")),
            extra_include_paths=_strings(a.get("extra_include_paths")), with_cuda=a.get("with_cuda")))
        return Unbuilt(str(a["name"]))

    cpp_extension.load_inline, cpp_extension.load = load_inline, load
    try:
        yield into
    finally:
        cpp_extension.load_inline, cpp_extension.load = real_inline, real_load


def import_recorded(path: Path, source: str, log_path: Path, found: list[Extension] | None = None) -> Imported:
    """Import the candidate (build.import_candidate) with its extension builds recorded, not run, into `found`.

    NOTE: names the candidate imported (`from ... import load_inline`) keep appending to `found` afterwards."""
    found = [] if found is None else found
    with recording(path, found):
        try:
            module, seconds = import_candidate(path, source, log_path)
        except BuildError as e:
            return Imported(None, tuple(found), e, e.seconds)
    return Imported(module, tuple(found), None, seconds)


def needs_gpu(error: BaseException | None) -> str | None:
    """One line, where an exception (or one it came from) only says there is no GPU here; else None."""
    if isinstance(error, BuildError) and error.__cause__ is not None:
        error = error.__cause__  # what the import raised, not the judge's summary of it
    seen = 0
    while error is not None and seen < 5:
        text = f"{type(error).__name__}: {error}"
        if _NO_GPU.search(text):
            return " ".join(text.split())[:300]
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None
