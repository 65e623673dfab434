"""Benchmark metrics from saved results: fast_p, geometric-mean speedups, per-category rows, failures."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from torchweld.judge.check_options import NOT_RUN

FAST_PS = (0.0, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile")  # eager PyTorch, torch.compile


@dataclass(frozen=True)
class CategoryRow:
    category: str
    count: int
    correct: int
    geomean_eager: float | None
    geomean_compile: float | None
    fast1_compile: float


@dataclass(frozen=True)
class Failure:
    label: str
    outcome: str
    message: str
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Metrics:
    """Over the judged results only: a `no_gpu` result (not run) is counted in `not_run` and nowhere else."""

    total: int
    correct: int
    not_run: int = 0
    outcomes: dict = field(default_factory=dict)  # outcome -> count
    fast: dict = field(default_factory=dict)  # baseline -> {p: fraction of ALL problems}
    geomean: dict = field(default_factory=dict)  # baseline -> geomean speedup or None
    timed: dict = field(default_factory=dict)  # baseline -> number of speedups in the geomean
    categories: tuple[CategoryRow, ...] = ()
    failures: tuple[Failure, ...] = ()

    @property
    def correct_rate(self) -> float:
        return self.correct / self.total if self.total else 0.0


def label(result: dict) -> str:
    return f"{result.get('category', 'root')}/{result.get('name', '?')}"


def is_verdict(result: dict) -> bool:
    """Whether the result judges its candidate: one built or checked without a GPU and never run does not."""
    return result.get("outcome") != NOT_RUN


def is_correct(result: dict) -> bool:
    return result.get("outcome") == "correct"


def speedup(result: dict, baseline: str) -> float | None:
    """Baseline time over ModelNew time from the judge's timing (recomputed from ms if the ratio is absent)."""
    timing = result.get("timing") or {}
    value = timing.get(f"speedup_vs_{baseline}")
    if value is None:
        base, cand = timing.get(f"{baseline}_ms"), timing.get("candidate_ms")
        value = base / cand if _positive(base) and _positive(cand) else None
    return float(value) if _positive(value) else None


def correct_speedups(results: list[dict], baseline: str) -> list[float]:
    """Speedups of the correct problems that have one; a wrong answer's speed means nothing."""
    return [s for r in results if is_correct(r) and (s := speedup(r, baseline)) is not None]


def fast_p(results: list[dict], p: float, baseline: str) -> float:
    """Fraction of ALL problems correct with speedup > p; fast_0 is the plain correctness rate."""
    if not results:
        return 0.0
    if p <= 0:
        hits = sum(is_correct(r) for r in results)
    else:
        hits = sum(1 for r in results if is_correct(r) and (s := speedup(r, baseline)) is not None and s > p)
    return hits / len(results)


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def failures(results: list[dict]) -> tuple[Failure, ...]:
    return tuple(
        Failure(label(r), str(r.get("outcome")), str(r.get("message") or ""), tuple(str(d) for d in r.get("details") or ()))
        for r in results
        if not is_correct(r)
    )


def categories(results: list[dict]) -> tuple[CategoryRow, ...]:
    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(str(r.get("category", "root")), []).append(r)
    return tuple(
        CategoryRow(
            category=name,
            count=len(rs),
            correct=sum(is_correct(r) for r in rs),
            geomean_eager=geomean(correct_speedups(rs, "eager")),
            geomean_compile=geomean(correct_speedups(rs, "compile")),
            fast1_compile=fast_p(rs, 1.0, "compile"),
        )
        for name, rs in sorted(groups.items())
    )


def compute(results: list[dict]) -> Metrics:
    """Every headline number the reports show, over the judged results."""
    judged = [r for r in results if is_verdict(r)]
    return Metrics(
        total=len(judged),
        correct=sum(is_correct(r) for r in judged),
        not_run=len(results) - len(judged),
        outcomes=dict(sorted(Counter(str(r.get("outcome")) for r in results).items())),
        fast={b: {p: fast_p(judged, p, b) for p in FAST_PS} for b in BASELINES},
        geomean={b: geomean(correct_speedups(judged, b)) for b in BASELINES},
        timed={b: len(correct_speedups(judged, b)) for b in BASELINES},
        categories=categories(judged),
        failures=failures(judged),
    )


def as_json(m: Metrics) -> dict:
    """The metrics block of results.json (fast_p keyed "fast_1.5" and so on)."""
    return {
        "total": m.total,
        "correct": m.correct,
        "correct_rate": m.correct_rate,
        "not_run": m.not_run,
        "outcomes": m.outcomes,
        "fast": {b: {f"fast_{p:g}": v for p, v in ps.items()} for b, ps in m.fast.items()},
        "geomean_speedup": m.geomean,
        "timed": m.timed,
        "categories": [vars(c) for c in m.categories],
    }


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
