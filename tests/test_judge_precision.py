"""The one strict-fp32 switch (judge/guards.py): the flags it sets and restores, and who uses it (CPU only:
the flags are settable without a GPU)."""
import ast
from pathlib import Path

import pytest
import torch

from torchweld.judge import first, guards

PKG = Path(guards.__file__).resolve().parents[1]


def flags():
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision())


@pytest.fixture
def tf32_on():
    """The flags as a user who allowed TF32 left them; put back as they were after the test."""
    saved = guards.set_fp32(True)
    yield flags()
    guards.restore_fp32(saved)


def test_strict_fp32_inside_and_the_callers_settings_after(tf32_on):
    assert tf32_on == (True, True, "high")
    with guards.fp32_mode(False) as line:
        assert flags() == (False, False, "highest")
        assert line.startswith("strict fp32")
    assert flags() == tf32_on


def test_tf32_allowed_inside_and_restored_after_an_exception():
    before = flags()
    with pytest.raises(ZeroDivisionError), guards.fp32_mode(True) as line:
        assert flags() == (True, True, "high") and "TF32 allowed" in line
        1 / 0
    assert flags() == before


def test_set_returns_what_it_replaced(tf32_on):
    saved = guards.set_fp32(False)
    assert saved == tf32_on and flags() == (False, False, "highest")
    guards.restore_fp32(saved)
    assert flags() == tf32_on


def test_the_anti_cheat_watches_every_flag_the_switch_sets():
    with guards.fp32_mode(False):
        strict = guards.precision_flags()
    with guards.fp32_mode(True):
        allowed = guards.precision_flags()
    changed = {k for k in strict if strict[k] != allowed[k]}
    assert {"cuda.matmul.allow_tf32", "cudnn.allow_tf32", "float32_matmul_precision"} <= changed


def test_the_first_check_uses_the_judges_switch():
    assert first.fp32_mode is guards.fp32_mode


def _sets_fp32_flags(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "set_float32_matmul_precision":
            return True
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Attribute) and n.attr == "allow_tf32":
                        return True
    return False


def test_no_other_judge_or_bench_file_sets_the_flags():
    files = sorted(p for folder in ("judge", "bench") for p in (PKG / folder).glob("*.py"))
    setters = [p.relative_to(PKG).as_posix() for p in files if _sets_fp32_flags(p)]
    assert setters == ["judge/guards.py"]
