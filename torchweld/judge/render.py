"""Render a judge result as a plain-text-friendly table (rich), for people; JSON is for programs."""
from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table

_STYLE = {"correct": "bold green", "wrong": "bold red", "cheat": "bold magenta", "no_build": "bold red",
          "runtime_error": "bold red", "timeout": "bold yellow", "no_gpu": "bold cyan"}


def _num(x, fmt="{:.2e}") -> str:
    return "-" if x is None else fmt.format(x)


def _rows(table: Table, section: str, entries: list[dict]):
    for e in entries:
        table.add_row(section, e.get("inputs", ""), "ok" if e.get("ok") else "FAIL", _num(e.get("max_abs")),
                      _num(e.get("rel")), str(e.get("first_bad") or "") + (f" {e['why']}" if e.get("why") else ""))


def render(result: dict, width: int = 120, color: bool = False) -> str:
    """The result as text: outcome line, per-check table, cheats, static findings, timing."""
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, no_color=not color, highlight=False)
    outcome = result.get("outcome") or "?"
    con.print(f"[{_STYLE.get(outcome, 'bold')}]{outcome.upper()}[/]  {result.get('name', '')}: {result.get('message', '')}")
    head = [f"problem {result.get('problem')}", f"candidate {result.get('candidate')}"]
    if result.get("extracted_from"):
        head.append(f"code from {result['extracted_from']}")
    head.append(f"device {result.get('device') or '-'}, torch {result.get('torch') or '-'}, "
                f"precision {result.get('precision') or '-'}, build {_num(result.get('build_s'), '{:.1f} s')}")
    for line in head:
        con.print(f"  {line}")
    if result.get("correctness") or result.get("generalization"):
        t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
        for col in ("check", "inputs", "result", "max abs", "rel", "first bad / why"):
            t.add_column(col, overflow="fold")
        _rows(t, "correctness", result.get("correctness", []))
        _rows(t, "generalisation", result.get("generalization", []))
        con.print(t)
    if result.get("cheats"):
        t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, title="anti-cheat", title_justify="left")
        t.add_column("check")
        t.add_column("caught")
        t.add_column("evidence", overflow="fold")
        for c in result["cheats"]:
            t.add_row(c["check"], "CAUGHT" if c.get("caught") else "no", c.get("evidence", ""))
        con.print(t)
    if result.get("static"):
        t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, title="static findings (evidence only)",
                  title_justify="left")
        for col in ("rule", "line", "text"):
            t.add_column(col, overflow="fold")
        for f in result["static"]:
            t.add_row(f["rule"], str(f["line"]), f["text"])
        con.print(t)
    tm = result.get("timing")
    if tm:
        t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, title="timing (median ms)", title_justify="left")
        for col in ("eager", "torch.compile", "candidate", "candidate again", "vs eager", "vs compile", "compile s"):
            t.add_column(col, justify="right")
        t.add_row(_num(tm.get("eager_ms"), "{:.4f}"), _num(tm.get("compile_ms"), "{:.4f}"),
                  _num(tm.get("candidate_ms"), "{:.4f}"), _num(tm.get("candidate_ms_repeat"), "{:.4f}"),
                  _num(tm.get("speedup_vs_eager"), "{:.2f}x"), _num(tm.get("speedup_vs_compile"), "{:.2f}x"),
                  _num(tm.get("compile_build_s"), "{:.1f}"))
        con.print(t)
        con.print(f"  method: {tm.get('method', '')}")
        if tm.get("wall_ms") is not None or tm.get("fresh_ms") is not None:
            con.print(f"  anti-cheat timing: call+sync {_num(tm.get('wall_ms'), '{:.4f}')} ms vs events "
                      f"{_num(tm.get('event_ms'), '{:.4f}')} ms; never-seen inputs {_num(tm.get('fresh_ms'), '{:.4f}')}"
                      f" ms vs seen {_num(tm.get('seen_ms'), '{:.4f}')} ms")
    for d in result.get("details", []):
        con.print(f"  - {d}")
    return buf.getvalue()
