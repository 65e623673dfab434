"""A quiet machine while one judge times: where the bench runs several judges at once (`--per-gpu`),
the one timing pauses the others (SIGSTOP to each one's process group) and resumes them after.

Why: the host's speed is part of a call's time wherever the GPU waits on launches. Beside busy
judges, the medians of launch-bound problems come out slower than one judge alone measures them,
and not by the same factor for eager, torch.compile and the candidate, so their ratio moves too.

The judges register in a directory (`CheckOptions.judges_dir`, set by the bench): one file per judge,
named by its process group (each judge runs in a session of its own), holding its command line, so
a pid that was reused by another program is never stopped. One judge times at a time (a lock in
that directory), so two cannot pause each other. `judge_ended` undoes every pause: `check` calls it
whenever a judge process ends, killed or not.
"""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

def _cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def register(directory: str | os.PathLike | None) -> Path | None:
    """Enter this process's group (this process leads it) into the directory; None where there is none."""
    if not directory or not hasattr(os, "getpgrp"):
        return None
    mine = _cmdline(os.getpid())
    if mine is None:  # no /proc: nothing could be checked before a pause, so never pause
        return None
    path = Path(directory) / str(os.getpgrp())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(mine)
    return path


def unregister(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _others(directory: Path) -> list[int]:
    """Registered groups other than ours whose leader is still the program that registered."""
    found = []
    for f in directory.iterdir():
        if not f.name.isdigit() or int(f.name) == os.getpgrp():
            continue
        with contextlib.suppress(OSError):
            if _cmdline(int(f.name)) == f.read_bytes():
                found.append(int(f.name))
    return found


def _signal_groups(groups: list[int], sig) -> None:
    for g in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, sig)


@contextlib.contextmanager
def quiet(directory: str | os.PathLike | None):
    """Every other judge registered in `directory` paused for the block (a no-op where there is none)."""
    if not directory or not Path(directory).is_dir():
        yield []
        return
    import fcntl

    with open(Path(directory) / "timing.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        paused = _others(Path(directory))
        try:
            _signal_groups(paused, signal.SIGSTOP)
            yield paused
        finally:
            _signal_groups(paused, signal.SIGCONT)


def judge_ended(group: int, directory: str | os.PathLike | None) -> None:
    """A judge's process group is gone, killed or not: its entry goes, and every other judge gets a
    SIGCONT (a killed judge may have died between its pause and its resume)."""
    if directory and Path(directory).is_dir():
        unregister(Path(directory) / str(group))
        _signal_groups(_others(Path(directory)), signal.SIGCONT)
