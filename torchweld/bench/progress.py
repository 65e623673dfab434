"""Live progress: a rich bar plus what each worker is on (TTY), or one plain line per finished problem."""
from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from torchweld.bench.metrics import is_correct, speedup
from torchweld.bench.tasks import Task

_STYLE = {"correct": "green", "wrong": "red", "cheat": "magenta", "timeout": "yellow", "no_gpu": "cyan"}


class Display:
    """Stateful by nature (it is the screen); created per run and used as a context manager."""

    def __init__(self, console: Console, total: int, slots: list[str | None], resumed: int):
        self.console, self.total, self.slots, self.resumed = console, total, slots, resumed
        self.finished = 0
        self.current: dict[int, tuple[Task, float]] = {}
        self.live = console.is_terminal
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console,
        )
        note = f" ({resumed} already done)" if resumed else ""
        self._bar = self._progress.add_task(f"judging{note}", total=total)
        self._live = Live(self, console=console, refresh_per_second=4, transient=False) if self.live else None

    def __enter__(self) -> "Display":
        if self._live:
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self.current.clear()
            self._live.stop()

    def __rich__(self):
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for wid, (task, t0) in sorted(self.current.items()):
            gpu = self.slots[wid] if wid < len(self.slots) else None
            who = f"worker {wid}" + (f" (GPU {gpu})" if gpu is not None else "")
            table.add_row(Text(who, style="dim"), Text(task.label), Text(f"{now - t0:.0f}s", style="dim"))
        return Group(self._progress, table)

    def hooks(self):
        return self.started, self.done

    def started(self, wid: int, task: Task) -> None:
        self.current[wid] = (task, time.monotonic())

    def done(self, wid: int, task: Task, result: dict) -> None:
        self.current.pop(wid, None)
        self.finished += 1
        self._progress.advance(self._bar)
        self.console.print(finished_line(self.finished, self.total, task, result), soft_wrap=True)


def finished_line(n: int, total: int, task: Task, result: dict) -> Text:
    """`[ 3/51] conv/x  correct  2.10x eager  1.30x compile  (41s)` (a Text: messages may hold [markup])."""
    outcome = str(result.get("outcome"))
    line = Text(f"[{n:>{len(str(total))}}/{total}] ")
    line.append(task.label, style="bold")
    line.append("  ")
    line.append(outcome, style=_STYLE.get(outcome, "red"))
    if is_correct(result):
        for b, name in (("eager", "eager"), ("compile", "compile")):
            s = speedup(result, b)
            if s is not None:
                line.append(f"  {s:.2f}x {name}", style="green" if s > 1 else "red")
    else:
        msg = " ".join(str(result.get("message") or "").split())
        line.append(f"  {msg[:160]}", style="dim")
    wall = (result.get("bench") or {}).get("wall_s")
    if wall is not None:
        line.append(f"  ({wall:.0f}s)", style="dim")
    return line
