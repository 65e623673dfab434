"""A compiler error's `main.cpp:N` or `cuda.cu:N` -> the line of the candidate's Python file it came from.

`load_inline` writes `main.cpp` as `#include <torch/extension.h>`, the `cpp_sources` strings joined by newlines,
then `PYBIND11_MODULE(...) {`, one `m.def(...)` per name in `functions` and `}`; and `cuda.cu` as three
`#include` lines followed by the `cuda_sources` strings. Read statically (nothing is executed): the sources
must be string literals, or names bound to string literals at module level.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_CUDA_HEAD = 3  # torch/types.h, cuda.h, cuda_runtime.h
_REF = re.compile(r"\b(main\.cpp|cuda\.cu):(\d+)\b")


@dataclass(frozen=True)
class Where:
    line: int  # 1-based line in the candidate
    text: str  # that line, stripped
    note: str = ""  # what the generated line was, where it is not the candidate's own text


@dataclass(frozen=True)
class _Piece:
    text: str
    line: int  # the candidate line holding the literal's first character


def _literal(node, names: dict) -> list[_Piece] | None:
    """The string pieces a `cpp_sources=` / `cuda_sources=` argument stands for, or None when not static."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [_Piece(node.value, node.lineno)]
    if isinstance(node, ast.Name) and node.id in names:
        return _literal(names[node.id], names)
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for elt in node.elts:
            got = _literal(elt, names)
            if got is None:
                return None
            out += got
        return out
    return None


def _map(pieces: list[_Piece], n: int) -> int | None:
    """Line n (1-based) of the pieces joined by newlines -> a candidate line."""
    k = n
    for p in pieces:
        count = p.text.count("\n") + 1
        if k <= count:
            return p.line + k - 1
        k -= count
    return None


def _calls(tree) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Attribute) and n.func.attr == "load_inline")
        or (isinstance(n.func, ast.Name) and n.func.id == "load_inline"))]


def _kw(call: ast.Call, name: str, pos: int | None = None):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return call.args[pos] if pos is not None and len(call.args) > pos else None


def locate(source: str, ref: str, extension: str | None = None) -> Where | None:
    """Where `main.cpp:N` / `cuda.cu:N` (as in `ref`) points in the candidate `source`; None when unknown."""
    m = _REF.search(ref)
    if not m:
        return None
    file, n = m.group(1), int(m.group(2))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    calls = _calls(tree)
    if extension is not None and len(calls) > 1:
        named = [c for c in calls
                 if isinstance(_kw(c, "name", 0), ast.Constant) and _kw(c, "name", 0).value == extension]
        calls = named or calls
    if len(calls) != 1:
        return None
    call, lines = calls[0], source.splitlines()
    if file == "cuda.cu":
        pieces = _literal(_kw(call, "cuda_sources", 2), names) if _kw(call, "cuda_sources", 2) is not None else None
        at = _map(pieces, n - _CUDA_HEAD) if pieces and n > _CUDA_HEAD else None
        return Where(at, lines[at - 1].strip()) if at and at <= len(lines) else None
    pieces = _literal(_kw(call, "cpp_sources", 1), names) if _kw(call, "cpp_sources", 1) is not None else None
    if pieces is None:
        return None
    cpp_lines = sum(p.text.count("\n") + 1 for p in pieces)
    if 1 < n <= 1 + cpp_lines:
        at = _map(pieces, n - 1)
        return Where(at, lines[at - 1].strip()) if at and at <= len(lines) else None
    k = n - 1 - cpp_lines - 2  # 0-based index among the m.def lines, after `PYBIND11_MODULE(...) {`
    funcs = _kw(call, "functions", 3)
    if funcs is None or not isinstance(funcs, (ast.List, ast.Tuple)) or not 0 <= k < len(funcs.elts):
        return None
    elt = funcs.elts[k]
    fname = elt.value if isinstance(elt, ast.Constant) else "?"
    return Where(elt.lineno, lines[elt.lineno - 1].strip(),
                 f"the pybind11 binding load_inline generates for {fname!r} in functions=[...]; the C++ side "
                 f"sees only cpp_sources, so {fname} must be declared there")


def refs(text: str) -> list[str]:
    """Every `main.cpp:N` / `cuda.cu:N` mentioned in `text`, in order, without repeats."""
    out = []
    for m in _REF.finditer(text):
        if m.group(0) not in out:
            out.append(m.group(0))
    return out


def mentions(source: str, name: str, limit: int = 4) -> list[Where]:
    """The candidate's lines that mention identifier `name` (where an undeclared name is defined or used),
    each noting the module-level string it sits in (`cuda_src`, `cpp_src`, ...)."""
    pat = re.compile(rf"(?<![\w]){re.escape(name.split('::')[-1])}(?![\w])")
    spans = _strings(source)
    out = []
    for i, ln in enumerate(source.splitlines(), 1):
        if pat.search(ln):
            inside = next((n for a, b, n in spans if a <= i <= b), "")
            out.append(Where(i, ln.strip(), f"in the string {inside}" if inside else ""))
    return out[:limit]


def _strings(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of each module-level `name = "..."` string."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [(node.value.lineno, node.value.end_lineno or node.value.lineno, t.id) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str) for t in node.targets if isinstance(t, ast.Name)]
