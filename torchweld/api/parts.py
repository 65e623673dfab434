"""A module compiled whole where the compiler can take it, else part by part: each submodule with
the inputs it saw on one eager call of the example, the parts the compiler cannot take left as they are."""
from __future__ import annotations

from pathlib import Path

import torch

from torchweld.api.whole import Compiled, PartError, compiled_module, emitted, instance, passthrough
from torchweld.options import Options


def compile_parts(module: torch.nn.Module, inputs: list, options: Options, cache: Path, name: str = "",
                  calls: dict | None = None) -> torch.nn.Module:
    """`module` compiled (see torchweld.compile); its `.torchweld.fallbacks` lists the parts left to the
    original forward, with why. `calls`: its submodules' recorded arguments, where already known."""
    try:
        _, source, path, cached = emitted(module, inputs, options, cache)
        return compiled_module(module, source, path, Compiled(source, path, cached))
    except PartError as e:
        why = str(e)
    if calls is None:
        calls = recorded_calls(module, inputs)
    return _split(module, calls, options, cache, name, [(name or "(the whole module)", why)], passthrough(module, why))


def _split(module, calls: dict, options: Options, cache: Path, name: str, fallbacks: list, source: str | None):
    """`module` as it is, each submodule that was called compiled in its place."""
    modules, parts = dict(module._modules), {}
    for c, child in module._modules.items():
        path = f"{name}.{c}" if name else c
        sub = {k[len(c) + 1:]: v for k, v in calls.items() if k.startswith(c + ".")}
        if child is None or (c not in calls and not sub):
            continue  # never called
        if _torch_leaf(child):
            continue  # NOTE: alone, one of PyTorch's own layers gains little from a file of its own: it runs as it is
        if calls.get(c) is not None:
            done = compile_parts(child, calls[c], options, cache, path, sub)
        elif c not in calls:  # a container (ModuleList, ModuleDict) whose items were called
            done = _split(child, sub, options, cache, path, [], None)
        else:
            fallbacks.append((path, "called with keyword arguments or values other than tensors"))
            continue
        modules[c], parts[c] = done, done.torchweld
        fallbacks += done.torchweld.fallbacks
    new = instance(module, {}, Compiled(source, fallbacks=tuple(fallbacks), parts=parts))
    new.__dict__["_modules"] = modules  # NOTE: a dict of its own: the compiled parts stand in for its submodules
    return new


def recorded_calls(module: torch.nn.Module, inputs: list) -> dict[str, list | None]:
    """Each submodule's positional tensor arguments at its first call in one eager run of
    `module(*inputs)` (no grad; buffers such as running statistics put back after), by path; None
    for one called with keyword arguments or other values."""
    seen: dict[str, list | None] = {}

    def hook(name):
        def record(_, args, kwargs):
            if name not in seen:
                ok = not kwargs and all(isinstance(a, torch.Tensor) for a in args)
                seen[name] = [a.detach().clone() for a in args] if ok else None
        return record

    handles = [m.register_forward_pre_hook(hook(n), with_kwargs=True) for n, m in module.named_modules() if n]
    saved = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        with torch.no_grad():
            module(*inputs)
    except Exception:
        return {}
    finally:
        for h in handles:
            h.remove()
        with torch.no_grad():
            for b, was in saved:
                b.copy_(was)
    return seen


def _torch_leaf(module: torch.nn.Module) -> bool:
    """One of PyTorch's own layers with no submodules (a Linear, a ReLU, a BatchNorm2d)."""
    return type(module).__module__.startswith("torch.") and not module._modules
