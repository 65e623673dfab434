"""`torchweld.compile`: any nn.Module and example inputs -> a module running our kernels, from Python."""
from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
from pathlib import Path

import torch

from torchweld.api.parts import compile_parts
from torchweld.api.whole import Compiled, PartError
from torchweld.options import Options

__all__ = ["CompileError", "Compiled", "PartError", "compile", "default_cache_dir"]

OPTIONS = tuple(f.name for f in dataclasses.fields(Options) if f.name not in ("dump", "seed"))


class CompileError(ValueError):
    """A call to torchweld.compile that cannot be taken (not a module, bad inputs or options); one line."""


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/torchweld/compiled`, or `~/.cache/torchweld/compiled`."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchweld" / "compiled"


def compile(module, example_inputs, *, cache_dir=None, **options) -> torch.nn.Module:  # noqa: A001 (as torch.compile)
    """`module` with its forward running fused kernels for inputs like `example_inputs`.

    The result shares `module`'s parameters, buffers and submodules (no copies: the same state_dict
    keys and tensors; training one trains the other), runs the original forward for inputs, modes or
    grad settings its kernels were not built for, and falls back part by part where the compiler
    cannot take the whole module (a warning names those parts once; `.torchweld.fallbacks` lists them).
    `.save(path)` writes the standalone ModelNew file. The file is cached by content hash in
    `cache_dir` (default: default_cache_dir()). `options`: those of Options (precision="tf32",
    cuda_graph, layout_plan, gemm, sms)."""
    if not isinstance(module, torch.nn.Module):
        raise CompileError(f"torchweld.compile: module must be an nn.Module, not {type(module).__name__}")
    inputs = [example_inputs] if isinstance(example_inputs, torch.Tensor) else example_inputs
    if not isinstance(inputs, (list, tuple)):
        raise CompileError(f"torchweld.compile: example_inputs must be a tensor or a list or tuple of them, "
                           f"not {type(example_inputs).__name__}")
    for i, a in enumerate(inputs):
        if not isinstance(a, (torch.Tensor, int, float, bool)):
            raise CompileError(f"torchweld.compile: example_inputs[{i}] is a {type(a).__name__}, not a tensor or number")
    try:
        inspect.signature(module.forward).bind(*inputs)
    except TypeError as e:
        raise CompileError(f"torchweld.compile: {type(module).__name__}.forward does not take {len(inputs)} "
                           f"example input(s): {e}") from None
    except ValueError:
        pass  # no signature to check against
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise CompileError(f"torchweld.compile: unknown option(s) {', '.join(unknown)} (known: {', '.join(OPTIONS)})")
    try:
        opts = Options(**options)
    except (TypeError, ValueError) as e:
        raise CompileError(f"torchweld.compile: {e}") from None
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CompileError(f"torchweld.compile: cannot use {cache} as the cache: {e.strerror}") from None
    new = compile_parts(module, list(inputs), opts, cache)
    fallbacks = new.torchweld.fallbacks
    if fallbacks:
        said = "; ".join(f"{part}: {why}" for part, why in fallbacks)
        warnings.warn(f"torchweld.compile: {len(fallbacks)} part(s) run the original forward: {said}", stacklevel=2)
    return new
