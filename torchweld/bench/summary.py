"""summary.md: headline numbers, per-category and per-problem tables, and every failure."""
from __future__ import annotations

from torchweld.bench.format import meta_value, ms, one_line, pct, rows, secs, times
from torchweld.bench.metrics import FAST_PS, Metrics, is_verdict, label

_META = ("date", "device", "torch", "command", "git", "torchweld", "problems", "candidates", "results_dir")


def render_markdown(results: list[dict], m: Metrics, meta: dict, notes: list[str]) -> str:
    lines = [f"# torchweld bench: {md(meta_value(meta, 'title'))}", ""]
    if meta.get("interrupted"):
        lines += ["> **Partial run**: interrupted before every problem was judged; rerun to resume.", ""]
    lines += [f"- **{k}**: {_code(meta_value(meta, k)) if k == 'command' else md(meta_value(meta, k))}" for k in _META]
    lines += ["", "## Headline", ""]
    if m.not_run:
        lines += [f"> **Not run: no GPU** for {m.not_run} of {m.total + m.not_run} problems: their candidates were "
                  "checked and built, never run. `no_gpu` is no verdict: it counts in none of the figures below, "
                  "and a run on a GPU judges them again.", ""]
    if m.total or not m.not_run:
        lines += [f"**{m.correct}/{m.total} correct ({pct(m.correct_rate)})**; "
                  f"geomean speedup {times(m.geomean['eager'])} vs eager over {m.timed['eager']} timed, "
                  f"{times(m.geomean['compile'])} vs torch.compile over {m.timed['compile']} timed.", ""]
    else:
        lines += ["**No problem was judged.**", ""]
    lines += ["| metric | vs eager | vs torch.compile |", "|---|---:|---:|"]
    for p in FAST_PS:
        name = f"fast_{p:g}" + (" (correct)" if p == 0 else f" (correct and > {p:g}x)")
        lines.append(f"| {name} | {pct(m.fast['eager'][p])} | {pct(m.fast['compile'][p])} |")
    lines.append(f"| geomean speedup | {times(m.geomean['eager'])} | {times(m.geomean['compile'])} |")
    lines += ["", "Outcomes: " + (", ".join(f"{k} {v}" for k, v in m.outcomes.items()) or "none"), ""]
    lines += [f"_{md(n)}_" for n in notes] + ([""] if notes else [])
    lines += ["## By category", "",
              "| category | problems | correct | geomean vs eager | geomean vs compile | fast_1 vs compile |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {md(c.category)} | {c.count} | {c.correct} | {times(c.geomean_eager)} | {times(c.geomean_compile)} "
              f"| {pct(c.fast1_compile)} |" for c in m.categories]
    lines += ["", "## Problems", "",
              "| problem | category | outcome | eager ms | compile ms | ModelNew ms | vs eager | vs compile "
              "| build s | cold build s | cold torch.compile s |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {md(r.name)} | {md(r.category)} | {md(r.outcome)} | {ms(r.eager_ms)} | {ms(r.compile_ms)} "
              f"| {ms(r.candidate_ms)} | {times(r.vs_eager)} | {times(r.vs_compile)} | {secs(r.build_s)} "
              f"| {secs(r.build_cold_s)} | {secs(r.compile_cold_s)} |"
              for r in rows(results)]
    lines += ["", f"## Failures ({len(m.failures)})", ""]
    lines += [f"- **{md(f.label)}**: `{md(f.outcome)}`: {md(one_line(f.message)) or '(no message)'}" for f in m.failures]
    if not m.failures:
        lines.append("None.")
    waiting = [r for r in results if not is_verdict(r)]
    if waiting:
        lines += ["", f"## Not run: no GPU ({len(waiting)})", ""]
        lines += [f"- **{md(label(r))}**: {md(one_line(r.get('message'))) or '(no message)'}" for r in waiting]
    return "\n".join(lines) + "\n"


def md(text) -> str:
    """Markdown-safe one line: results carry compiler output, so no raw HTML and no table-breaking pipes."""
    s = one_line(text)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _code(text: str) -> str:
    s = one_line(text, limit=1000)
    fence = "``" if "`" in s else "`"
    return f"{fence} {s} {fence}"
