"""Render results.json, summary.md, report.html and speedups.png from saved results alone (no GPU needed)."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from torchweld.bench.format import pct, times
from torchweld.bench.page import render_html
from torchweld.bench.metrics import as_json, compute
from torchweld.bench.tasks import load_results, write_json
from torchweld.bench.plot import plot_speedups
from torchweld.bench.summary import render_markdown


@dataclass(frozen=True)
class Written:
    """The files a render produced, and notes about what it could not (e.g. no matplotlib)."""

    results_json: Path
    summary_md: Path
    report_html: Path
    speedups_png: Path | None
    notes: tuple[str, ...] = ()
    headline: str = ""


def write_reports(out: Path, results: list[dict], meta: dict) -> Written:
    """Write all four files into `out`; the plot is optional, the rest always appear."""
    out.mkdir(parents=True, exist_ok=True)
    meta = complete_meta(meta, results)
    m = compute(results)
    notes = []
    png = out / "speedups.png"
    note = plot_speedups(results, png)
    if note:
        notes.append(note)
        png.unlink(missing_ok=True)  # a stale plot from an earlier run would contradict the tables
    results_json = out / "results.json"
    write_json(results_json, {"meta": meta, "metrics": as_json(m), "results": results})
    summary = out / "summary.md"
    summary.write_text(render_markdown(results, m, meta, notes))
    html = out / "report.html"
    html.write_text(render_html(results, m, meta, notes, None if note else png))
    return Written(results_json, summary, html, None if note else png, tuple(notes), headline(m))


def headline(m) -> str:
    """One line for the terminal: correctness, both geomeans, fast_1 vs torch.compile; what was not run."""
    not_run = f"{m.not_run} not run: no GPU (checked and built only; a run on a GPU judges them)"
    if m.not_run and not m.total:
        return f"{m.not_run} problems, none judged: {not_run}"
    line = (f"{m.total} {'judged' if m.not_run else 'problems'}: {m.correct} correct ({pct(m.correct_rate)}); "
            f"geomean speedup {times(m.geomean['eager'])} vs eager, {times(m.geomean['compile'])} vs torch.compile; "
            f"fast_1 vs torch.compile {pct(m.fast['compile'][1.0])}")
    return line + (f"; {not_run}" if m.not_run else "")


def rerender(out: Path) -> Written:
    """`--report-only`: the per-problem files are the truth; results.json supplies run metadata (or results, if alone)."""
    saved = _read(out / "results.json")
    results = load_results(out)
    if not results and isinstance(saved.get("results"), list):
        results = [r for r in saved["results"] if isinstance(r, dict)]
    meta = saved.get("meta") if isinstance(saved.get("meta"), dict) else {}
    return write_reports(out, results, meta)


def complete_meta(meta: dict, results: list[dict]) -> dict:
    """Fill device/torch from the results when the run didn't know them (the parent never touches CUDA)."""
    meta = dict(meta)
    for key in ("device", "torch"):
        if not meta.get(key):
            seen = Counter(str(r[key]) for r in results if r.get(key))
            meta[key] = seen.most_common(1)[0][0] if seen else None
    meta.setdefault("title", Path(str(meta.get("problems") or "results")).name or "results")
    return meta


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
