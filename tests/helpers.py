"""Build IR graphs from small modules, and compile CUDA sources with nvcc, for the compiler's CPU tests."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from torchweld.capture import capture
from torchweld.interp import run_graph
from torchweld.plan import plan
from torchweld.simplify import simplify


class Fn(nn.Module):
    """A module whose forward is a plain function of its inputs and optional parameters."""

    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            self.register_parameter(name, nn.Parameter(value))

    def forward(self, *xs):
        return self.fn(self, *xs)


def graphs(fn, *inputs, **params):
    """(captured, simplified) graphs of fn(self, *inputs)."""
    g = capture(Fn(fn, **params), list(inputs))
    return g, simplify(g)


def kernels(fn, *inputs, **params):
    """The kernel plan of fn(self, *inputs)."""
    return plan(graphs(fn, *inputs, **params)[1])


def run(graph, module_params: dict, inputs: list):
    return run_graph(graph, module_params, inputs)


ARITH = {"add", "sub", "mul", "div", "neg", "fma"}


def arithmetic_ops(graph) -> int:
    return sum(1 for n in graph.nodes if n.op in ARITH)


SPECIAL = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0e38, -3.0e38, 1e-40, float("inf"), float("-inf"), float("nan")])


def special_values(shape) -> torch.Tensor:
    """A tensor of `shape` with every special float value, then random values."""
    numel = 1
    for s in shape:
        numel *= s
    flat = torch.randn(numel) * 3
    k = min(numel, SPECIAL.numel())
    flat[:k] = SPECIAL[:k]
    return flat[torch.randperm(numel)].reshape(shape)


NVCC = shutil.which("nvcc")
_EXTERN_C = re.compile(r'extern "C" [^(;]*?\b(\w+)\(')


def nvcc_errors(sources: dict[str, str], cu: Path) -> dict[str, str]:
    """Compile CUDA sources for sm_90 (device and host code) as one translation unit written to `cu`,
    each in a namespace of its own with its extern "C" names made unique: nvcc's fixed cost is paid
    once, not per source. The errors, by the name of the source they fall in (all where unknown)."""
    includes, parts, spans = [], [], []
    for i, (name, src) in enumerate(sources.items()):
        body = [line for line in src.splitlines() if not line.startswith("#include")]
        includes += [line for line in src.splitlines() if line.startswith("#include") and line not in includes]
        text = "\n".join(body)
        for fn in set(_EXTERN_C.findall(text)):
            text = re.sub(rf"\b{fn}\b", f"{fn}_{i}", text)
        parts.append(f"namespace twsrc{i} {{  // {name}\n{text}\n}}  // namespace twsrc{i}\n")
    line = len(includes) + 1
    for part in parts:
        spans.append((line, line + part.count("\n")))
        line = spans[-1][1]
    cu.write_text("\n".join(includes) + "\n" + "".join(parts))
    proc = subprocess.run([NVCC, "-arch=sm_90", "-O3", "-c", str(cu), "-o", str(cu.with_suffix(".o"))],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        return {}
    names, errors = list(sources), {}
    for err in (line for line in proc.stderr.splitlines() if "error" in line):
        at = re.search(rf"{re.escape(cu.name)}[(:](\d+)", err)
        ns = re.search(r"twsrc(\d+)", err)
        hit = [names[int(ns[1])]] if ns else [n for n, (a, b) in zip(names, spans) if at and a <= int(at[1]) < b]
        for name in hit:
            errors[name] = errors.get(name, "") + err + "\n"
    return errors or dict.fromkeys(names, proc.stderr[-2000:])


def sweep_ways(metafunc, names: str, items: list, ways: list[tuple], ids: list[str]) -> None:
    """Parametrize `names` (an item, then a way's values) over items x ways under --full-sweep; by default
    each item runs on one way, in turn, so every item and every way still run (CI's time budget)."""
    full = metafunc.config.getoption("--full-sweep")
    metafunc.parametrize(names, [pytest.param(item, *way, id=f"{name}-{'-'.join(map(str, way))}")
                                 for i, (item, name) in enumerate(zip(items, ids))
                                 for j, way in enumerate(ways) if full or j == i % len(ways)])
