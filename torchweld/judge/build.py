"""Import (and so build) a candidate, turning compiler output into a short error that names what broke."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

_GCC = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$")
_NVCC = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$")
_LD = re.compile(r"undefined reference to [`'](?P<sym>[^'`]+)'|undefined symbol: (?P<sym2>\S+)")
_Q, _E = "['\u2018`]", "['\u2019]"  # gcc quotes names with \u2018...\u2019 under a UTF-8 locale
_NAMES = [
    _Q + r"(?:::)?([\w:]+)" + _E + r" was not declared in this scope",
    r'identifier "([\w:]+)" is undefined',
    r"use of undeclared identifier " + _Q + r"([\w:]+)" + _E,
    _Q + r"([\w:]+)" + _E + r" has not been declared",
    _Q + r"(\w+)" + _E + r" is not a member of",
    r"no matching function for call to " + _Q + r"([\w:]+)",
    _Q + r"([\w:]+)" + _E + r" does not name a type",
]
_KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+|__forceinline__\s+)*"
                     r"void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)")
_TRITON = re.compile(r"@triton\.(?:jit|autotune)[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)")


class BuildError(Exception):
    """The candidate did not import: `message` is one line, `details` a few more (compiler lines, names)."""

    def __init__(self, message: str, details: list[str], seconds: float):
        super().__init__(message)
        self.message, self.details, self.seconds = message, details, seconds


@contextmanager
def redirected_fds(log_path: Path):
    """Send this process's fds 1 and 2 (so also ninja and nvcc, which inherit them) to `log_path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    py_out, py_err = sys.stdout, sys.stderr
    # NOTE: Python-level streams too: under a test runner sys.stdout is not fd 1.
    text = open(log_path, "a", buffering=1)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = text
        yield
    finally:
        text.flush()
        sys.stdout, sys.stderr = py_out, py_err
        text.close()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _demangle(sym: str) -> str:
    if shutil.which("c++filt") and sym.startswith("_Z"):
        try:
            return subprocess.run(["c++filt", sym], capture_output=True, text=True, timeout=10).stdout.strip() or sym
        except (OSError, subprocess.SubprocessError):
            pass
    return sym


def summarize_build_log(text: str) -> tuple[str | None, list[str], list[str]]:
    """(extension name, first compiler error lines as `file:line: msg`, identifiers the errors name)."""
    ext = re.search(r"Error building extension '([^']+)'", text)
    errors, names = [], []
    for raw in text.splitlines():
        line = raw.strip()
        m = _GCC.match(line) or _NVCC.match(line)
        if m:
            short = f"{Path(m.group('file')).name}:{m.group('line')}: error: {m.group('msg').strip()}"
            if short not in errors:
                errors.append(short)
        for pat in _NAMES:
            names += [n for n in re.findall(pat, line) if n not in names]
        for m2 in _LD.finditer(line):
            sym = _demangle(m2.group("sym") or m2.group("sym2"))
            if sym not in names:
                names.append(sym)
            if not errors:
                errors.append(f"link/import error: undefined symbol {sym}")
    return (ext.group(1) if ext else None), errors[:5], names[:5]


def _source_line(source: str, lineno: int | None) -> str:
    lines = source.splitlines()
    return lines[lineno - 1].strip() if lineno and 0 < lineno <= len(lines) else ""


def build_failure(exc: BaseException, log_text: str, seconds: float, path: str = "", source: str = "") -> BuildError:
    """A short BuildError from an import exception plus everything the build printed."""
    text = f"{log_text}\n{exc}"
    ext, errors, names = summarize_build_log(text)
    if errors:
        head = f"extension {ext} failed to build: " if ext else "build failed: "
        msg = head + errors[0]
        if names:
            msg += f" (names: {', '.join(names)})"
    else:
        last = str(exc).strip().splitlines()
        msg = f"import failed: {type(exc).__name__}: {last[0] if last else ''}"[:400]
    # Where in the candidate it failed: its own frames only, innermost last.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if path and f.filename == path][-2:]
    details = errors[1:] + ([f"undeclared or missing: {', '.join(names)}"] if names else []) + [
        f"candidate line {f.lineno}: {_source_line(source, f.lineno) or (f.line or '').strip()}"[:250] for f in frames]
    return BuildError(msg, details, seconds)


def import_candidate(path: Path, source: str, log_path: Path):
    """Execute the candidate source as a fresh module; returns (module, seconds) or raises BuildError."""
    name = "torchweld_candidate_" + hashlib.sha1(source.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module
    t0 = time.perf_counter()
    try:
        code = compile(source, str(path), "exec")
        with redirected_fds(log_path):
            exec(code, module.__dict__)
    except BaseException as e:  # noqa: BLE001 - SystemExit from a candidate is a failed import too
        sys.modules.pop(name, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        if isinstance(e, SyntaxError):
            raise BuildError(f"syntax error at line {e.lineno}: {e.msg}", [], time.perf_counter() - t0) from e
        raise build_failure(e, log, time.perf_counter() - t0, str(path), source) from e
    seconds = time.perf_counter() - t0
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise BuildError("the candidate defines no class ModelNew", [], seconds)
    return module, seconds


def kernel_names(source: str) -> set[str]:
    """Names of the GPU kernels a candidate defines (CUDA `__global__` functions, Triton `@jit`s)."""
    return set(_KERNEL.findall(source)) | set(_TRITON.findall(source))
