"""Shared formatting for the reports: per-problem rows and number formats (plain text, no markup)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from torchweld.bench.metrics import is_correct, label, speedup


@dataclass(frozen=True)
class Row:
    """One problem as the tables show it; speedups only for correct problems (a wrong one's speed is moot)."""

    label: str
    name: str
    category: str
    outcome: str
    message: str
    eager_ms: float | None
    compile_ms: float | None
    candidate_ms: float | None
    vs_eager: float | None
    vs_compile: float | None
    build_s: float | None
    build_cold_s: float | None = None  # from `--prewarm`: the candidate's first build
    compile_cold_s: float | None = None  # from `--prewarm`: torch.compile's first compile


def rows(results: list[dict]) -> list[Row]:
    out = []
    for r in results:
        timing = r.get("timing") or {}
        ok = is_correct(r)
        out.append(Row(
            label=label(r),
            name=str(r.get("name", "?")),
            category=str(r.get("category", "root")),
            outcome=str(r.get("outcome")),
            message=one_line(r.get("message")),
            eager_ms=_num(timing.get("eager_ms")),
            compile_ms=_num(timing.get("compile_ms")),
            candidate_ms=_num(timing.get("candidate_ms")),
            vs_eager=speedup(r, "eager") if ok else None,
            vs_compile=speedup(r, "compile") if ok else None,
            build_s=_num(r.get("build_s")),
            build_cold_s=_num((r.get("prewarm") or {}).get("candidate_build_cold_s")),
            compile_cold_s=_num((r.get("prewarm") or {}).get("compile_cold_s")),
        ))
    return out


def one_line(text, limit: int = 300) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def secs(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def times(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def meta_value(meta: dict, key: str) -> str:
    v = meta.get(key)
    return "unknown" if v in (None, "") else str(v)


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
