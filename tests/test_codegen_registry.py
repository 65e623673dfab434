"""Codegen's kind table: module_source prints what the table says, every kind the planner makes has
an entry, the codegen modules import one another without a cycle, and the fixed C++ of cuh/ is
pasted as it is (and shipped with the package)."""
from __future__ import annotations

import ast
import tomllib
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import graphs, kernels
from torchweld.codegen import KINDS, Kind, kind_of, module_source
from torchweld.codegen.common import CUH, cuh
from torchweld.ir import Kernel

ROOT = Path(__file__).resolve().parents[1]
CODEGEN = ROOT / "torchweld" / "codegen"


def _pointwise():
    return kernels(lambda s, x: torch.relu(x) * 2.0, torch.randn(4, 8))


def test_module_source_prints_a_registered_kind(monkeypatch):
    p = _pointwise()
    toy = replace(p.kernels[0], kind="toy")
    toy_kind = Kind(lambda k, graph: f"// the toy kernel {k.name}\n", preludes=("block_scan.cuh",))
    monkeypatch.setitem(KINDS, "toy", toy_kind)
    src = module_source([toy], p.graph)
    assert src.endswith(f"// the toy kernel {toy.name}\n")
    assert cuh("block_scan.cuh") in src and "tw_launch_" not in src
    monkeypatch.undo()
    assert "toy" not in KINDS
    with pytest.raises(KeyError):
        module_source([toy], p.graph)


def _planner_kinds() -> set[str]:
    """Every `kind` the planner gives a Kernel: the literals in its Kernel(...) calls, and the default."""
    default = Kernel.__dataclass_fields__["kind"].default
    found = {default}
    for path in (ROOT / "torchweld" / "plan").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Kernel":
                args = node.args[5:6] + [kw.value for kw in node.keywords if kw.arg == "kind"]
                found |= {a.value for a in args if isinstance(a, ast.Constant)}
    return found


def test_every_kind_the_planner_makes_is_registered():
    kinds = _planner_kinds()
    assert {"pointwise", "reduce", "pool", "depthwise"} <= kinds
    # A planned reduce kernel is written as one of these (kind_of); the others by their own name.
    assert kinds - {"reduce"} <= set(KINDS) and {"reduce", "rows", "scan", "batch_norm"} <= set(KINDS)


def test_kind_of_reaches_every_entry():
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            return torch.relu(self.bn(x))

    x = torch.randn(2, 4, 8, 8)
    plans = [
        _pointwise(),
        kernels(lambda s, x: torch.softmax(x, dim=-1), torch.randn(4, 64)),
        kernels(lambda s, x: x - x.mean(-1, keepdim=True), torch.randn(4, 64)),
        kernels(lambda s, x: torch.cumsum(x, dim=-1), torch.randn(4, 64)),
        kernels(lambda s, x: torch.cat([x, x * 2.0], dim=1), torch.randn(4, 64)),
        kernels(lambda s, x: F.max_pool2d(x, 2), x),
        kernels(lambda s, x: F.conv2d(x, s.w, padding=1, groups=4), x, w=torch.randn(4, 1, 3, 3)),
    ]
    from torchweld.capture import capture
    from torchweld.plan import plan
    from torchweld.simplify import simplify

    plans.append(plan(simplify(capture(Norm().train(), [x]))))
    from torchweld.options import Options
    plans.append(plan(graphs(lambda s, x: torch.relu(x @ s.w), torch.randn(8, 16), w=torch.randn(16, 8))[-1],
                      Options(gemm=True)))  # our GEMM
    plans.append(plan(graphs(lambda s, x: torch.relu(torch.nn.functional.conv2d(x, s.w)), torch.randn(1, 4, 6, 6),
                             w=torch.randn(8, 4, 3, 3))[-1], Options(conv_ours=True)))  # our convolution
    reached = {kind_of(k, p.graph.by_name()) for p in plans for k in p.kernels}
    assert reached == set(KINDS)


def _codegen_imports(path: Path) -> set[str]:
    """The codegen modules `path` imports (`from torchweld.codegen import reduce` names the module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "torchweld.codegen":
            out |= {a.name for a in node.names if (CODEGEN / f"{a.name}.py").exists()}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchweld.codegen."):
            out.add(node.module.split(".")[2])
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles in `graph` (module -> modules it imports), each as a path back to its start."""
    done, stack, found = set(), [], []

    def visit(m):
        if m in stack:
            found.append(stack[stack.index(m):] + [m])
            return
        if m in done:
            return
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            visit(n)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)
    return found


def test_codegen_modules_import_without_a_cycle():
    graph = {p.stem: _codegen_imports(p) for p in CODEGEN.glob("*.py") if p.stem != "__init__"}
    assert graph["registry"] >= {"pointwise", "reduce", "pool", "depthwise"}  # the parser sees the table's imports
    assert cycles(graph) == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from torchweld.codegen import reduce, nothing_here\nfrom torchweld.codegen.common import cuh\n")
    assert _codegen_imports(f) == {"reduce", "common"}
    cycle = {"reduce": {"common"}, "common": {"scan"}, "scan": {"reduce"}}
    assert cycles(cycle) == [["common", "scan", "reduce", "common"]]
    assert cycles({"reduce": {"common"}, "scan": {"common", "reduce"}}) == []


def test_kind_modules_import_common_not_each_other():
    """Each kind module takes shared helpers from common; only the row kernels extend another kind's code
    (and the convolution its GEMM's main loop, tiles and precision splits)."""
    allowed = {"common", "ops", "reduce_stats"}
    kinds = {p.stem for p in CODEGEN.glob("*.py")} - allowed - {"__init__", "registry"}
    extra = {m: _codegen_imports(CODEGEN / f"{m}.py") - allowed for m in sorted(kinds)}
    assert {m: i for m, i in extra.items() if i} == {"reduce_rows": {"reduce"}, "gemm_kernel": {"gemm", "gemm_source"},
                                                     "conv_spec": {"gemm"}, "conv_kernel": {"conv_spec", "conv_source"}}


def test_preludes_are_pasted_as_written():
    p = kernels(lambda s, x: torch.cumsum(x, dim=-1).half(), torch.randn(4, 64))
    src = module_source(list(p.kernels), p.graph)
    for name in ("prelude.cuh", "lowp.cuh", "error_string.cuh", "block_reduce.cuh", "block_scan.cuh"):
        assert cuh(name) in src, name
    assert src.index(cuh("block_reduce.cuh")) < src.index(cuh("block_scan.cuh"))
    fp32 = _pointwise()
    assert cuh("lowp.cuh") not in module_source(list(fp32.kernels), fp32.graph)


def test_cuh_files_are_package_data_and_free_of_pytorch():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data["torchweld.codegen"]
    files = sorted(CUH.glob("*.cuh"))
    assert files and all(any(fnmatch(f"cuh/{f.name}", pat) for pat in patterns) for f in files)
    includes = [line for f in files for line in f.read_text().splitlines() if line.startswith("#include")]
    assert includes and not [i for i in includes if any(w in i for w in ("torch", "ATen", "c10"))]


def test_launch_says_what_a_pointwise_wrapper_tests():
    """A full-size operand is read 16 bytes at a time (its pointer must be aligned); a broadcast bias is not."""
    from torchweld.codegen import kernel_launch, reduce_launch

    p = kernels(lambda s, x: torch.relu(x + s.b), torch.randn(4, 8, 16), b=torch.randn(8, 1))
    (k,) = p.kernels
    launch = kernel_launch(k, p.graph)
    assert launch.workspace == 0 and launch.vec == 4
    assert dict(launch.aligned) == {"x0": 16}
    assert reduce_launch is kernel_launch


def test_kinds_with_a_channels_last_build_are_those_the_plan_lets_run_channels_last():
    """plan/conv_layout.takes_channels_last answers for pointwise and pool kernels only: the kinds with a `_cl` build."""
    from torchweld.plan.conv_layout import takes_channels_last

    assert {name for name, kind in KINDS.items() if kind.channels_last} == {"pointwise", "pool"}
    p = kernels(lambda s, x: torch.softmax(x, dim=1), torch.randn(2, 4, 6, 6))
    (k,) = p.kernels
    assert not takes_channels_last(k, p.graph, {k.inputs[0]: (144, 1, 24, 4)})
