"""Load a problem file: `class Model`, `get_inputs()`, `get_init_inputs()`."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


class ProblemError(Exception):
    """A problem file that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class Problem:
    path: Path
    source: str
    module: ModuleType

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def model_cls(self):
        return self.module.Model

    def init_inputs(self) -> list:
        """The constructor's arguments, checked to be a list or tuple."""
        args = _call(self, "get_init_inputs")
        if not isinstance(args, (list, tuple)):
            raise ProblemError(f"{self.path}: get_init_inputs() returned {type(args).__name__}, not a list")
        return list(args)

    def inputs(self) -> list:
        """Fresh forward inputs; every one must be a tensor (or a plain number)."""
        args = _call(self, "get_inputs")
        if not isinstance(args, (list, tuple)):
            raise ProblemError(f"{self.path}: get_inputs() returned {type(args).__name__}, not a list")
        import torch

        for i, a in enumerate(args):
            if not isinstance(a, (torch.Tensor, int, float, bool)):
                raise ProblemError(f"{self.path}: get_inputs()[{i}] is a {type(a).__name__}, not a tensor")
        return list(args)

    def build_model(self, seed: int | None = 0):
        """Construct `Model(*init_inputs)`, seeding the RNG first so weights are reproducible."""
        import torch

        if seed is not None:
            torch.manual_seed(seed)
        try:
            return self.model_cls(*self.init_inputs())
        except ProblemError:
            raise
        except Exception as e:
            raise ProblemError(f"{self.path}: Model(*get_init_inputs()) failed: {type(e).__name__}: {e}") from e


def _call(problem: Problem, fn: str):
    try:
        return getattr(problem.module, fn)()
    except Exception as e:
        raise ProblemError(f"{problem.path}: {fn}() failed: {type(e).__name__}: {e}") from e


def load_module(path: Path, source: str, prefix: str = "torchweld_problem") -> ModuleType:
    """Execute `source` as a fresh module named after its content (so classes pickle and inspect)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    name = f"{prefix}_{digest}"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
    except SyntaxError as e:
        del sys.modules[name]
        raise ProblemError(f"{path}:{e.lineno}: syntax error: {e.msg}") from e
    except Exception as e:
        del sys.modules[name]
        raise ProblemError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    return module


def load_problem(path) -> Problem:
    """Read and execute a problem file, checking it defines the three pieces."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"{path}: no such file")
    source = path.read_text()
    module = load_module(path, source)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(f"{path}: missing {', '.join(missing)} (a problem defines Model, get_inputs, get_init_inputs)")
    import torch

    if not (isinstance(module.Model, type) and issubclass(module.Model, torch.nn.Module)):
        raise ProblemError(f"{path}: Model is not an nn.Module subclass")
    return Problem(path=path, source=source, module=module)
