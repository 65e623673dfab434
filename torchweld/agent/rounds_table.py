"""The run as a table: one row per conversation, its verdict each round, and the best speed-up per problem."""
from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table

SHORT = {"correct": "ok", "wrong": "wrong", "cheat": "cheat", "no_build": "no build", "runtime_error": "crash",
         "timeout": "timeout", "no_code": "no code", "truncated": "cut off", "judge_error": "judge error"}


def _cell(event: dict) -> str:
    word = SHORT.get(event.get("outcome"), str(event.get("outcome")))
    sp = event.get("speedup_vs_eager")
    return f"{word} {sp:.2f}x" if event.get("outcome") == "correct" and sp else word


def table(events: list[dict], keys: set[str], rounds: int) -> Table:
    """Round events of the conversations in `keys` (this run's), as a rich table."""
    convs: dict[str, dict[int, dict]] = {}
    failed: dict[str, str] = {}
    meta: dict[str, tuple] = {}
    for e in events:
        k = e.get("key")
        if k not in keys:
            continue
        meta[k] = (e.get("problem", "?"), e.get("sample", 0))
        if e.get("event") == "round":
            convs.setdefault(k, {})[e["round"]] = e
        elif e.get("event") == "error":
            failed[k] = "request failed"
    t = Table(box=box.SIMPLE, title="torchweld agent", title_justify="left")
    t.add_column("problem", no_wrap=True)
    t.add_column("sample", justify="right")
    for n in range(1, rounds + 1):
        t.add_column(f"round {n}")
    t.add_column("best vs eager", justify="right")
    t.add_column("vs compile", justify="right")
    for k in sorted(meta, key=lambda k: meta[k]):
        by_round = convs.get(k, {})
        cells = [_cell(by_round[n]) if n in by_round else ("-" if n <= len(by_round) + 1 and k not in failed
                                                           else "") for n in range(1, rounds + 1)]
        if k in failed and len(by_round) < rounds:
            cells[len(by_round)] = failed[k]
        ok = [e for e in by_round.values() if e.get("outcome") == "correct" and e.get("speedup_vs_eager")]
        best = max(ok, key=lambda e: e["speedup_vs_eager"], default=None)
        t.add_row(meta[k][0], str(meta[k][1]), *cells,
                  f"{best['speedup_vs_eager']:.2f}x" if best else "-",
                  f"{best['speedup_vs_compile']:.2f}x" if best and best.get("speedup_vs_compile") else "-")
    return t


def render(events: list[dict], keys: set[str], rounds: int, width: int = 120) -> str:
    """The table as plain text (for the summary file)."""
    buf = io.StringIO()
    Console(file=buf, width=width, no_color=True, highlight=False).print(table(events, keys, rounds))
    return buf.getvalue()
