"""The link check of build-only judging: a function the candidate's objects call that none of them defines.

Importing a built extension fails with `undefined symbol` where main.cpp declares a function with one
signature and cuda.cu defines it with another; this finds that from the objects alone, without linking
against a CUDA build of PyTorch. Only the candidate's own names count: a symbol from a library
namespace, or whose name the candidate's sources never mention, is the libraries' to resolve.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

_LIBRARY = ("at::", "c10::", "torch::", "std::", "pybind11::", "caffe2::", "__gnu_cxx::", "__cxxabiv1::", "cub::",
            "thrust::", "cuda::", "nvcuda::", "cute::", "cutlass::", "THP", "operator", "_object")


def _symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) symbols of an object file, from `nm -P`."""
    out = subprocess.run(["nm", "-P", str(obj)], capture_output=True, text=True, timeout=120).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            (undefined if parts[1] == "U" else defined if parts[1] not in ("w", "v") else set()).add(parts[0])
    return defined, undefined


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> readable C++ names (itself where c++filt is missing)."""
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, timeout=60).stdout
    lines = out.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def base_name(readable: str) -> str:
    """`ns::fused(at::Tensor, float)` -> `fused`."""
    return readable.split("(", 1)[0].rsplit("::", 1)[-1].strip()


def unresolved(objects: list[tuple[str, Path]], text: str) -> list[str]:
    """One line per function that a file calls and no file defines, naming what is defined under its name."""
    if not objects or not shutil.which("nm"):
        return []
    defined: dict[str, str] = {}
    needed: dict[str, str] = {}
    for file, obj in objects:
        d, u = _symbols(obj)
        defined.update({s: file for s in d})
        needed.update({s: file for s in u if s.startswith("_Z")})
    missing = [s for s in needed if s not in defined]
    names = demangle(missing + [s for s in defined if s.startswith("_Z")])
    found = []
    for sym in missing:
        readable = names[sym]
        base = base_name(readable)
        if "(" not in readable or readable.startswith(_LIBRARY) or not re.search(rf"\b{re.escape(base)}\b", text):
            continue
        same = [f"{defined[s]} defines {names[s]}" for s in defined if s in names and base_name(names[s]) == base
                and "(" in names[s]]
        found.append(f"{needed[sym]} calls {readable}, which no file defines (undefined symbol {sym})"
                     + (f"; {same[0]}" if same else ""))
    return found
