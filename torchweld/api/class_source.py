"""The source a standalone file needs for an in-memory module: its class (renamed `Model`) and the
names its methods use from their module or enclosing function, each as an import, a constant or the
source of a helper defined beside it."""
from __future__ import annotations

import ast
import builtins
import inspect
import re
import sys
import textwrap
import types

from torchweld.runtime.config import _tw_plain as _plain

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


class SourceError(Exception):
    """The module's class cannot be written into a standalone file; the message is one line."""


def _text(obj) -> str:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as e:
        raise SourceError(f"no source for {getattr(obj, '__qualname__', obj)!r}: {e}") from None


def _free_names(text: str) -> list[str]:
    """Names the code reads and never binds itself (its globals and its enclosing function's locals)."""
    tree = ast.parse(text)
    bound, read = set(), []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (read.append(n.id) if isinstance(n.ctx, ast.Load) else bound.add(n.id))
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not tree.body[0]:
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names)
    return list(dict.fromkeys(r for r in read if r not in bound and not hasattr(builtins, r)))


def _scope(obj) -> dict:
    """What `obj`'s code can see by name: its module's globals, under the locals of enclosing functions."""
    scope = dict(vars(sys.modules[obj.__module__])) if obj.__module__ in sys.modules else {}
    fns = [f for f in vars(obj).values() if inspect.isfunction(f)] if inspect.isclass(obj) else [obj]
    for f in fns:
        scope.update(getattr(f, "__globals__", {}))
        try:
            scope.update(inspect.getclosurevars(f).nonlocals)
        except (TypeError, ValueError):
            pass
    return scope


def _importable(value) -> bool:
    """Whether `from value.__module__ import value.__qualname__` gives back `value`."""
    mod, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if not mod or mod == "__main__" or "<" in qual or "." in qual or mod not in sys.modules:
        return False
    return getattr(sys.modules[mod], qual, None) is value


class _Collector:
    """The definitions in order, each before what uses it."""

    def __init__(self, home: str):
        self.home = home  # the class's module: its helpers are copied, not imported
        self.lines: list[str] = []
        self.done: set[str] = set()

    def need(self, text: str, scope: dict, owner: str):
        for name in _free_names(text):
            if name in self.done or name not in scope:
                continue
            self.done.add(name)
            self.define(name, scope[name], owner)

    def define(self, name: str, value, owner: str):
        if isinstance(value, types.ModuleType):
            mod = value.__name__
            self.lines.append(f"import {mod}" if mod == name else f"import {mod} as {name}")
        elif _plain(value):
            self.lines.append(f"{name} = {value!r}")
        elif (inspect.isclass(value) or inspect.isfunction(value)) and _copied(value.__module__, self.home):
            text = _text(value)
            self.need(text, _scope(value), owner)
            if value.__name__ != name:
                text += f"\n{name} = {value.__name__}\n"
            self.lines.append(text)
        elif (inspect.isclass(value) or inspect.isfunction(value)) and _importable(value):
            mod, qual = value.__module__, value.__qualname__
            self.lines.append(f"from {mod} import {qual}" + (f" as {name}" if qual != name else ""))
        elif not _copied(self.home, self.home) and getattr(sys.modules.get(self.home), name, None) is value:
            self.lines.append(f"from {self.home} import {name}")  # a typing construct, say, of torch's own module
        else:
            raise SourceError(f"{owner} uses {name!r}, a {type(value).__name__}, which a standalone file cannot hold")


def _copied(module: str, home: str) -> bool:
    """Whether what a class uses from `module` is copied into the file (the class's own module, unless
    it is PyTorch's) rather than imported."""
    return module == home and not (home == "torch" or home.startswith("torch."))


def class_source(cls: type) -> str:
    """A problem-like source for `cls`: the names its methods use, then `class Model` (cls renamed)."""
    text = _text(cls)
    name = cls.__name__
    renamed = re.sub(rf"^class {re.escape(name)}\b", "class Model", text, count=1, flags=re.M)
    renamed = renamed.replace(f"super({name}, self)", "super()")
    collector = _Collector(cls.__module__)
    collector.done.update({name, "torch", "nn", "F"})
    collector.need(text, _scope(cls), cls.__qualname__)
    parts = [HEAD, *collector.lines, "", renamed]
    return "\n".join(p.rstrip() + "\n" for p in parts)
