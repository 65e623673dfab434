"""One module compiled whole: the source its file is printed from, the cache, and the module returned
(the original's class with the emitted forward, sharing the original's parameters, buffers and submodules)."""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from torchweld import __version__
from torchweld.api.class_source import SourceError, class_source
from torchweld.capture import capture
from torchweld.codegen.gemm_kernel import check as gemm_check
from torchweld.emit import emit, emit_passthrough
from torchweld.options import Options
from torchweld.pipeline import batch_checked
from torchweld.plan import plan
from torchweld.problem import load_module
from torchweld.runtime.config import _tw_config
from torchweld.simplify import simplify

PACKAGE = Path(__file__).resolve().parents[1]


class PartError(Exception):
    """The compiler cannot take this module whole; the message is the one-line reason."""


@dataclass(frozen=True)
class Target:
    """What a module's file is printed from: a problem-like source with `class Model`, the header's
    name, and what ModelNew.__init__ checks (the constructor's arguments, or else the configuration)."""

    source: str
    name: str
    init_args: list | None = None
    config: str | None = None


@dataclass(frozen=True)
class Compiled:
    """What `torchweld.compile` did for a module (the returned module's `.torchweld`)."""

    source: str | None  # the standalone ModelNew file (None: there is none to write)
    path: Path | None = None  # the cache's copy
    cached: bool = False  # read from the cache, not compiled
    fallbacks: tuple[tuple[str, str], ...] = ()  # (part, why) for each part left to the original forward
    parts: dict = field(default_factory=dict)  # submodule path -> its Compiled, where the root fell back

    def save(self, path) -> Path:
        """Write the standalone file (the one `torchweld compile` writes for a problem file)."""
        if self.source is None:
            raise PartError(f"nothing to save: {self.fallbacks[0][1] if self.fallbacks else 'no source'}")
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.source)
        return out


def target(module: torch.nn.Module) -> Target:
    """The source of `module`'s class; a problem file's own where the module is its Model."""
    cls = type(module)
    found = _problem_target(cls, module)
    if found is not None:
        return found
    try:
        return Target(class_source(cls), cls.__name__, None, _tw_config(module))
    except SourceError as e:
        raise PartError(str(e)) from None
    except SyntaxError as e:
        raise PartError(f"the source of {cls.__qualname__} does not parse alone: {e.msg}") from None


def _problem_target(cls, module) -> Target | None:
    """A problem file's source, name and constructor arguments, where `module` is that file's Model."""
    mod = sys.modules.get(cls.__module__)
    file = getattr(mod, "__file__", None)
    if cls.__name__ != "Model" or not file or not all(hasattr(mod, n) for n in ("get_inputs", "get_init_inputs")):
        return None
    try:
        source = Path(file).read_text()
        init = list(mod.get_init_inputs())
        with torch.random.fork_rng(devices=[]):
            same = _tw_config(cls(*init)) == _tw_config(module)
    except Exception:
        return None
    return Target(source, Path(file).stem, init if same else None, None if same else _tw_config(module))


def _compiler_digest() -> str:
    """The compiler's own sources, so that another version of it never reads this one's files."""
    h = hashlib.sha256(__version__.encode())
    for p in sorted(PACKAGE.rglob("*")):
        if p.suffix in (".py", ".cuh") and "__pycache__" not in p.parts:
            h.update(p.read_bytes())
    return h.hexdigest()


def cache_key(t: Target, inputs: list, options: Options) -> str:
    """The content hash a module's file is cached under."""
    meta = [(tuple(x.shape), str(x.dtype), x.device.type) if isinstance(x, torch.Tensor) else repr(x) for x in inputs]
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    text = repr((_compiler_digest(), torch.__version__, device, t, meta, repr(options)))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _write(path: Path, text: str) -> None:
    """Write through a temporary file, so that a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _reason(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def emitted(module: torch.nn.Module, inputs: list, options: Options, cache: Path) -> tuple[Target, str, Path, bool]:
    """(target, the ModelNew file, its path in the cache, whether it was read from there); a failure,
    cached too, raises PartError."""
    t = target(module)
    key = cache_key(t, inputs, options)
    path, fail = cache / f"{key}.py", cache / f"{key}.fail"
    if path.is_file():
        return t, path.read_text(), path, True
    if fail.is_file():
        raise PartError(fail.read_text().strip())
    try:
        try:
            filename = inspect.getsourcefile(type(module))
        except TypeError:
            filename = None
        graph = capture(module, inputs, filename=filename)
        simplified = simplify(graph)
        planned = batch_checked(module, inputs, simplified, plan(simplified, options, gemm_check))
        source = emit(planned, t.source, t.name, options, t.init_args, t.config)
    except Exception as e:  # any compiler failure: capture, an unsupported op, a bug of ours
        _write(fail, _reason(e))
        raise PartError(_reason(e)) from e
    _write(path, source)
    return t, source, path, False


def passthrough(module: torch.nn.Module, why: str) -> str | None:
    """The original-forward file `torchweld compile` writes where it fails (None: no source to write it from)."""
    try:
        t = target(module)
        return emit_passthrough(t.source, t.name, why)
    except Exception:
        return None


def compiled_module(module: torch.nn.Module, source: str, path: Path, info: Compiled) -> torch.nn.Module:
    """The emitted file loaded, and `module` as an instance of a subclass of its class whose forward
    is ModelNew's; it shares `module`'s parameters, buffers and submodules (the same dicts)."""
    try:
        mod = load_module(path, source, prefix="torchweld_compiled")
    except Exception as e:
        raise PartError(f"loading the file failed: {_reason(e)}") from e
    cls, new = type(module), mod.ModelNew
    attrs = {"forward": new.forward, "_tw_general": cls.forward}
    if hasattr(new, "_tw_fast"):  # the fast path replayed as a CUDA graph
        attrs["_tw_fast"] = new._tw_fast
    return instance(module, attrs, info)


def instance(module: torch.nn.Module, attrs: dict, info: Compiled) -> torch.nn.Module:
    """A shallow copy of `module` as an instance of a subclass of its class with `attrs`, `.torchweld`
    and (where its class has none) `.save(path)`."""
    cls = type(module)
    attrs = {"__module__": cls.__module__, "__doc__": cls.__doc__, "__qualname__": cls.__qualname__, **attrs}
    if not hasattr(cls, "save"):
        attrs["save"] = lambda self, path: self.torchweld.save(path)
    sub = type(cls.__name__, (cls,), attrs)
    new = sub.__new__(sub)
    new.__dict__.update(module.__dict__)  # NOTE: the same _parameters, _buffers and _modules dicts: nothing copied
    new.__dict__.update(_tw_same_init=True, torchweld=info)
    return new
