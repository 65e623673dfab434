"""The package layout shows the pipeline: stages import only the stages before them, files stay short."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "torchweld"
# The compiler's stages in pipeline order; a module may import its own stage and the ones before it.
STAGES = ("capture", "simplify", "plan", "codegen", "emit")
# Below every stage: what all of them share.
BASE = ("ir", "tiling", "options", "problem")
MAX_LINES = 400


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path


def imports(path: Path) -> set[str]:
    """Every torchweld module `path` imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchweld"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("torchweld"))
    return out


def part(module: str) -> str:
    """The stage or base module a torchweld module belongs to ("" for the rest: cli, judge, bench...)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return top if top in STAGES or top in BASE else ""


def rank(module: str) -> int | None:
    p = part(module)
    return -1 if p in BASE else STAGES.index(p) if p in STAGES else None


def violations() -> list[str]:
    found = []
    for name, path in _modules():
        mine = rank(name)
        if mine is None:
            continue
        for imp in imports(path):
            theirs = rank(imp)
            if theirs is None:
                found.append(f"{name} imports {imp}, which is outside the compiler")
            elif theirs > mine or (mine == -1 and theirs == -1 and part(imp) not in ("ir", part(name))
                                   and part(name) == "ir"):
                found.append(f"{name} imports {imp}, a later stage")
    return found


def test_stages_import_only_earlier_stages():
    assert violations() == []


def test_no_file_over_400_lines():
    long = [f"{p.relative_to(PKG.parent)}: {n}" for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert long == []


def test_checker_sees_a_backward_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from torchweld.emit import emit\n")
    assert "torchweld.emit" in imports(f)
    assert rank("torchweld.emit.module") > rank("torchweld.plan.rows") > rank("torchweld.ir")


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_is_a_package(stage):
    assert (PKG / stage / "__init__.py").exists()


def test_no_two_modules_share_a_name():
    """Files of one name in two folders are told apart by their names (an `__init__.py` aside)."""
    seen: dict[str, list[str]] = {}
    for path in PKG.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.parent.relative_to(PKG.parent)))
    assert {name: dirs for name, dirs in seen.items() if len(dirs) > 1} == {}
