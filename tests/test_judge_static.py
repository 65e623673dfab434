"""Static checks: each cheat fixture shows the evidence it should; honest code shows none of the serious rules."""
from pathlib import Path

import pytest

from torchweld.judge.static import reference_ops, scan

FIX = Path(__file__).parent / "fixtures" / "judge"
PROBLEM = (FIX / "problem_relu_bias.py").read_text()
SERIOUS = {"other_stream", "concurrency", "timer_patch", "judge_patch", "try_fallback", "reference_model",
           "tf32_flag", "half_cast", "tensor_subclass", "rng_patch", "introspection", "global_hook", "verdict_write"}


def rules(path: Path) -> set[str]:
    return {f.rule for f in scan(path.read_text(), PROBLEM)}


@pytest.mark.parametrize("fixture,expected", [
    ("side_stream", {"other_stream"}),
    ("timer_patch", {"timer_patch"}),
    ("threads", {"concurrency"}),
    ("child_process", {"concurrency"}),
    ("try_fallback", {"try_fallback", "torch_reference_op"}),
    ("calls_reference", {"reference_model"}),
    ("lazy_subclass", {"tensor_subclass"}),
    ("tf32_flags", {"tf32_flag"}),
    ("fp16_compute", {"half_cast"}),
])
def test_cheat_fixture_static_evidence(fixture, expected):
    assert expected <= rules(FIX / "cheats" / f"{fixture}.py")


TRUST = FIX / "trust"


@pytest.mark.parametrize("fixture,expected", [
    ("patch_judge", {"judge_patch"}),
    ("stack_timing", {"introspection"}),
    ("own_verdict", {"verdict_write"}),
    ("rng_patch", {"rng_patch"}),
    ("gc_reference", {"introspection"}),
    ("hook_reference", {"global_hook"}),
    ("precision_in_call", {"tf32_flag"}),
    ("forged_timing", {"introspection"}),
])
def test_trust_fixture_static_evidence(fixture, expected):
    assert expected <= rules(TRUST / f"{fixture}.py")


def test_honest_fixture_is_clean():
    assert not rules(FIX / "honest_relu_bias.py") & SERIOUS
    assert not rules(TRUST / "honest_cpu.py") & SERIOUS


def test_findings_carry_lines():
    src = "import torch\nclass ModelNew:\n    def forward(self, x):\n        s = torch.cuda.Stream()\n"
    (f,) = [f for f in scan(src) if f.rule == "other_stream"]
    assert f.line == 4 and "torch.cuda.Stream" in f.text


def test_aliases_are_resolved():
    src = "import time as t\nfrom torch import cuda\nt.perf_counter = None\ncuda.synchronize = print\n"
    found = [(f.rule, f.line) for f in scan(src)]
    assert ("timer_patch", 3) in found and ("timer_patch", 4) in found


def test_cuda_text_rules():
    src = 'src = """\ncudaStreamCreate(&s);\nstd::thread t(work);\n"""\n'
    found = {(f.rule, f.line) for f in scan(src)}
    assert ("other_stream", 2) in found and ("concurrency", 3) in found


def test_half_cast_only_on_fp32_problems():
    src = "class ModelNew:\n    def forward(self, x):\n        return x.half()\n"
    assert "half_cast" in {f.rule for f in scan(src, PROBLEM)}
    assert "half_cast" not in {f.rule for f in scan(src, "x = torch.randn(3, dtype=torch.float16)")}


def test_reference_ops_come_from_forward():
    assert reference_ops(PROBLEM) == {"relu"}


def test_syntax_error_is_a_finding():
    (f,) = scan("def f(:\n")
    assert f.rule == "syntax" and f.line == 1
