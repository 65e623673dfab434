"""report.html: one self-contained page (inline CSS and JS, plot embedded) from saved results."""
from __future__ import annotations

import base64
import math
from html import escape
from pathlib import Path

from torchweld.bench.format import meta_value, ms, one_line, pct, rows, secs, times
from torchweld.bench.metrics import FAST_PS, Metrics

_BADGE = {
    "correct": "#1a7f37", "wrong": "#cf222e", "cheat": "#8250df", "no_build": "#bc4c00",
    "runtime_error": "#a40e26", "timeout": "#9a6700", "compile_error": "#953800",
    "no_candidate": "#6e7781", "judge_error": "#24292f", "no_gpu": "#0969da",
}

_CSS = """
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;
color:#1f2328;background:#f6f8fa}main{max-width:1280px;margin:0 auto;padding:28px 24px 60px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:34px 0 10px}
.meta{color:#59636e;font-size:13px}.meta code{background:#eaeef2;padding:1px 5px;border-radius:4px;word-break:break-all}
.warn{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:8px 12px;margin:12px 0}
.note{color:#59636e;font-style:italic}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(220px,1fr));gap:14px;margin:20px 0}
.card{background:#fff;border:1px solid #d1d9e0;border-radius:10px;padding:16px 18px}
.card .v{font-size:32px;font-weight:650;letter-spacing:-.5px}.card .k{color:#59636e;font-size:13px}
.card .s{color:#59636e;font-size:12px;margin-top:2px}.good{color:#1a7f37}.bad{color:#cf222e}
.panel{background:#fff;border:1px solid #d1d9e0;border-radius:10px;padding:14px;overflow-x:auto}
.panel img{display:block;max-width:100%;height:auto;margin:0 auto}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{padding:6px 10px;border-bottom:1px solid #e6eaef;text-align:left;white-space:nowrap}
th{background:#eef1f4;position:sticky;top:0;font-weight:600;cursor:pointer;user-select:none}
th:after{content:" \\2195";color:#8c959f;font-size:11px}th.asc:after{content:" \\25B2"}th.desc:after{content:" \\25BC"}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}tbody tr:hover{background:#f3f6fa}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600}
details.fails>summary{font-weight:600;cursor:pointer;font-size:15px;margin:6px 0}
details.fail{background:#fff;border:1px solid #d1d9e0;border-radius:8px;margin:6px 0;padding:6px 12px}
details.fail summary{cursor:pointer}details.fail pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;
padding:8px;border-radius:6px;font-size:12px;max-height:360px;overflow:auto}
.msg{color:#59636e}.small{font-size:12px;color:#59636e}
"""

# Tiny sorter: click a header; numeric cells sort by their data-v (missing values always last).
_JS = """
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
    var asc=!th.classList.contains('asc');t.querySelectorAll('th').forEach(function(h){h.classList.remove('asc','desc')});
    th.classList.add(asc?'asc':'desc');var body=t.tBodies[0];var rs=Array.prototype.slice.call(body.rows);
    rs.sort(function(a,b){var x=a.cells[i].dataset.v,y=b.cells[i].dataset.v;
      if(x===undefined){x=a.cells[i].textContent;y=b.cells[i].textContent;return asc?x.localeCompare(y):y.localeCompare(x)}
      if(x==='')return 1;if(y==='')return -1;return asc?x-y:y-x});
    rs.forEach(function(r){body.appendChild(r)})})})});
"""


def render_html(results: list[dict], m: Metrics, meta: dict, notes: list[str], png: Path | None) -> str:
    title = f"torchweld bench: {meta_value(meta, 'title')}"
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>",
             "<meta name=viewport content='width=device-width,initial-scale=1'>",
             f"<style>{_CSS}</style></head><body><main>", f"<h1>{escape(title)}</h1>", _meta(meta)]
    if meta.get("interrupted"):
        parts.append("<div class=warn><b>Partial run</b>: interrupted before every problem was judged; "
                     "rerun the same command to resume.</div>")
    if m.not_run:
        parts.append(f"<div class=warn><b>Not run: no GPU</b> for {m.not_run} of {m.total + m.not_run} problems: "
                     "checked and built only. <code>no_gpu</code> is no verdict: it counts in no figure here, and a "
                     "run on a GPU judges them again.</div>")
    parts += [_cards(m), _fast_table(m)]
    parts += [f"<p class=note>{escape(n)}</p>" for n in notes]
    if png is not None and png.is_file():
        data = base64.b64encode(png.read_bytes()).decode()
        parts.append(f"<h2>Speedups</h2><div class=panel><img alt='per-problem speedups' "
                     f"src='data:image/png;base64,{data}'></div>")
    parts += [_problems(results), _categories(m), _failures(m)]
    parts.append(f"<script>{_JS}</script></main></body></html>")
    return "\n".join(parts) + "\n"


def _meta(meta: dict) -> str:
    items = [f"{k} <b>{escape(meta_value(meta, k))}</b>" for k in ("date", "device", "torch", "git", "torchweld")]
    return (f"<div class=meta>{' &middot; '.join(items)}<br>"
            f"<code>{escape(meta_value(meta, 'command'))}</code></div>")


def _cards(m: Metrics) -> str:
    cards = [
        ("correct", pct(m.correct_rate), f"{m.correct} of {m.total} {'judged ' if m.not_run else ''}problems", None),
        ("geomean speedup vs eager", times(m.geomean["eager"]), f"over {m.timed['eager']} correct, timed",
         m.geomean["eager"]),
        ("geomean speedup vs torch.compile", times(m.geomean["compile"]), f"over {m.timed['compile']} correct, timed",
         m.geomean["compile"]),
        ("fast_1 vs torch.compile", pct(m.fast["compile"][1.0]), "of all problems: correct and faster", None),
    ]
    out = []
    for key, value, sub, ratio in cards:
        cls = "" if ratio is None else (" good" if ratio > 1 else " bad" if ratio < 1 else "")
        out.append(f"<div class=card><div class=k>{escape(key)}</div><div class='v{cls}'>{escape(value)}</div>"
                   f"<div class=s>{escape(sub)}</div></div>")
    return "<div class=cards>" + "".join(out) + "</div>"


def _fast_table(m: Metrics) -> str:
    head = "<tr><th>metric</th><th class=n>vs eager</th><th class=n>vs torch.compile</th></tr>"
    body = "".join(
        f"<tr><td>fast_{p:g}{' (correct)' if p == 0 else f' (correct, &gt; {p:g}x)'}</td>"
        f"{_num(m.fast['eager'][p], pct)}{_num(m.fast['compile'][p], pct)}</tr>" for p in FAST_PS
    )
    outcomes = " ".join(f"{_badge(k)} {v}" for k, v in m.outcomes.items())
    return (f"<table class=sortable style='max-width:560px'><thead>{head}</thead><tbody>{body}</tbody></table>"
            f"<p class=small>outcomes: {outcomes or 'none'}</p>")


def _problems(results: list[dict]) -> str:
    head = ("<tr><th>problem</th><th>category</th><th>outcome</th><th class=n>eager ms</th><th class=n>compile ms</th>"
            "<th class=n>ModelNew ms</th><th class=n>vs eager</th><th class=n>vs compile</th><th class=n>build s</th></tr>")
    body = []
    for r in rows(results):
        body.append(
            f"<tr><td>{escape(r.name)}</td><td>{escape(r.category)}</td>"
            f"<td data-v='{_ORDER.get(r.outcome, 99)}'>{_badge(r.outcome, r.message)}</td>"
            f"{_num(r.eager_ms, ms)}{_num(r.compile_ms, ms)}{_num(r.candidate_ms, ms)}"
            f"{_speed(r.vs_eager)}{_speed(r.vs_compile)}{_num(r.build_s, secs)}</tr>"
        )
    return (f"<h2>Problems ({len(body)})</h2><p class=small>click a column to sort; hover an outcome for its message</p>"
            f"<div class=panel style='padding:0'><table class=sortable><thead>{head}</thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _categories(m: Metrics) -> str:
    head = ("<tr><th>category</th><th class=n>problems</th><th class=n>correct</th><th class=n>geomean vs eager</th>"
            "<th class=n>geomean vs compile</th><th class=n>fast_1 vs compile</th></tr>")
    body = "".join(
        f"<tr><td>{escape(c.category)}</td>{_num(c.count, str)}{_num(c.correct, str)}{_speed(c.geomean_eager)}"
        f"{_speed(c.geomean_compile)}{_num(c.fast1_compile, pct)}</tr>" for c in m.categories
    )
    return f"<h2>By category</h2><table class=sortable><thead>{head}</thead><tbody>{body}</tbody></table>"


def _failures(m: Metrics) -> str:
    if not m.failures:
        return "<h2>Failures</h2><p>None: every problem is correct.</p>"
    items = []
    for f in m.failures:
        detail = "\n".join(f.details) or "(no details)"
        items.append(f"<details class=fail><summary>{_badge(f.outcome)} <b>{escape(f.label)}</b> "
                     f"<span class=msg>{escape(one_line(f.message))}</span></summary>"
                     f"<pre>{escape(f.message)}\n\n{escape(detail)}</pre></details>")
    return (f"<h2>Failures</h2><details class=fails open><summary>{len(m.failures)} problems failed "
            f"(click one for details)</summary>{''.join(items)}</details>")


_ORDER = {k: i for i, k in enumerate(_BADGE)}


def _badge(outcome: str, title: str = "") -> str:
    colour = _BADGE.get(outcome, "#6e7781")
    tip = f" title='{escape(title, quote=True)}'" if title else ""
    return f"<span class=badge style='background:{colour}'{tip}>{escape(outcome)}</span>"


def _num(v, fmt) -> str:
    return f"<td class=n data-v='{'' if v is None else v}'>{escape(fmt(v))}</td>"


def _speed(v: float | None) -> str:
    """A speedup cell tinted green above 1x and red below, stronger the further from 1x."""
    if v is None:
        return "<td class=n data-v=''>–</td>"
    strength = min(abs(math.log2(v)) / 2, 1.0)
    alpha = 0.12 + 0.5 * strength
    rgb = "26,127,55" if v > 1 else "207,34,46" if v < 1 else "140,149,159"
    return f"<td class=n data-v='{v}' style='background:rgba({rgb},{alpha:.2f})'>{escape(times(v))}</td>"
