"""Metric math on the fixture results set, against hand-computed values."""
import math
from pathlib import Path

import pytest

from torchweld.bench.metrics import compute, fast_p, geomean, speedup
from torchweld.bench.tasks import load_results

FIXTURE = Path(__file__).parent / "fixtures" / "bench"

# Correct with timings: speedups vs eager 2.0, 0.8, 2.5, 6.0, 2.0 (mish: recomputed from ms 1.0/0.5),
# vs compile 1.5, 0.64, 1.25, 2.0 (mish has no torch.compile time); bmm_gate is correct but untimed.


@pytest.fixture(scope="module")
def results():
    return load_results(FIXTURE)


def test_fixture_covers_every_outcome(results):
    outcomes = {r["outcome"] for r in results}
    assert outcomes == {"correct", "wrong", "cheat", "no_build", "runtime_error", "timeout", "compile_error",
                        "no_candidate"}
    assert len(results) == 13


def test_fast_p_is_over_all_problems(results):
    assert fast_p(results, 0, "eager") == pytest.approx(6 / 13)  # correctness rate, timing or not
    assert fast_p(results, 0, "compile") == pytest.approx(6 / 13)
    assert fast_p(results, 1, "eager") == pytest.approx(4 / 13)
    assert fast_p(results, 1.5, "eager") == pytest.approx(4 / 13)
    assert fast_p(results, 2, "eager") == pytest.approx(2 / 13)  # 2.0 exactly is not > 2
    assert fast_p(results, 1, "compile") == pytest.approx(3 / 13)
    assert fast_p(results, 1.5, "compile") == pytest.approx(1 / 13)  # 1.5 exactly is not > 1.5
    assert fast_p(results, 2, "compile") == 0.0
    assert fast_p([], 1, "eager") == 0.0


def test_geomean_over_correct_timed(results):
    m = compute(results)
    assert m.geomean["eager"] == pytest.approx(48 ** (1 / 5))  # 2 * 0.8 * 2.5 * 6 * 2 = 48
    assert m.geomean["compile"] == pytest.approx(2.4 ** (1 / 4))  # 1.5 * 0.64 * 1.25 * 2 = 2.4
    assert m.timed == {"eager": 5, "compile": 4}
    assert geomean([]) is None
    assert geomean([4.0, 1.0]) == pytest.approx(2.0)


def test_speedup_recomputed_from_ms_and_ignores_nonsense():
    assert speedup({"timing": {"eager_ms": 3.0, "candidate_ms": 1.5}}, "eager") == pytest.approx(2.0)
    assert speedup({"timing": {"eager_ms": 3.0, "candidate_ms": 0}}, "eager") is None
    assert speedup({"timing": {"speedup_vs_compile": math.nan}}, "compile") is None
    assert speedup({"timing": None}, "eager") is None


def test_categories_and_failures(results):
    m = compute(results)
    cats = {c.category: c for c in m.categories}
    assert set(cats) == {"conv", "elementwise", "matmul", "root"}
    conv = cats["conv"]
    assert (conv.count, conv.correct) == (4, 2)
    assert conv.geomean_eager == pytest.approx(math.sqrt(1.6))
    assert conv.geomean_compile == pytest.approx(math.sqrt(0.96))
    assert conv.fast1_compile == pytest.approx(0.25)
    assert cats["elementwise"].geomean_compile is None and cats["elementwise"].fast1_compile == 0.0
    assert cats["root"].geomean_eager == pytest.approx(6.0)
    assert m.outcomes["correct"] == 6 and sum(m.outcomes.values()) == 13
    failed = {f.label: f for f in m.failures}
    assert len(failed) == 7 and "matmul/bmm_gate" not in failed
    assert failed["root/fused_thing"].outcome == "compile_error"
    assert "scatter_reduce" in failed["root/fused_thing"].message
