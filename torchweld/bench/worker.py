"""Judge one problem (compiling it first under `--compile`) and save its result; the per-GPU worker loop."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from torchweld.bench.tasks import Task, results_path, write_json

# Outcomes the bench adds to the judge's own (correct|wrong|cheat|no_build|runtime_error|timeout).
COMPILE_ERROR = "compile_error"  # `--compile`: compile_file raised
NO_CANDIDATE = "no_candidate"  # `--candidates`: no file for this problem
JUDGE_ERROR = "judge_error"  # the judge itself raised: a bench/judge bug, not the candidate's fault
BAD_PROBLEM = "bad_problem"  # the judge found the problem file itself unusable (ProblemError)

# Our setting -> the names the judge's options may call it (its CheckOptions says `timeout_s`).
_ALIASES = {"timeout": ("timeout", "timeout_s"), "timing": ("timing",)}


@dataclass(frozen=True)
class Job:
    """What every worker needs: where results go, judge settings, and the (injectable) check/compile."""

    out: Path
    timeout: float | None = None
    timing: bool = True
    check: Callable | None = None  # None: torchweld.judge.parent.check, imported in the worker
    compile_fn: Callable | None = None  # None: torchweld.pipeline.compile_file
    judge: tuple = ()  # (name, value) overrides of the judge's options
    gpu_lock: bool = False  # several workers share a GPU: each judge takes its lock for the GPU work
    quiet: bool = False  # several judges at once: the one timing pauses the others (judge/quiet.py)

    def shared(self, gpu: str | None) -> dict:
        """What the judges of this run share, as the judge's options name them: the lock of the GPU
        `gpu` and the directory judges register in (made here, once per judge)."""
        found = {}
        if self.gpu_lock:
            lock = self.out / "locks" / f"gpu{gpu if gpu is not None else ''}.lock"
            lock.parent.mkdir(parents=True, exist_ok=True)
            found["gpu_lock"] = str(lock)
        if self.quiet:
            judges = self.out / "locks" / "judges"
            judges.mkdir(parents=True, exist_ok=True)
            found["judges_dir"] = str(judges)
        return found


def blank_result(task: Task, outcome: str, message: str, details: list[str] | None = None) -> dict:
    """A result in the judge's shape for a problem the judge never saw (so reports need no special case)."""
    return {
        "problem": str(task.problem),
        "name": task.stem,
        "candidate": str(task.candidate) if task.candidate else None,
        "outcome": outcome,
        "message": message,
        "details": list(details or []),
        "build_s": None,
        "correctness": [],
        "generalization": [],
        "cheats": [],
        "static": [],
        "timing": None,
        "device": None,
        "torch": None,
        "precision": None,
        "extracted_from": None,
    }


def finish(task: Task, result: dict, job: Job, started: float, worker: int | None, gpu: str | None) -> dict:
    """Tag a result with the bench's bookkeeping and save it at once (what resume and reports read)."""
    result = dict(result)
    result.update(category=task.category, key=task.key, rel=task.rel)
    result.setdefault("name", task.stem)
    from torchweld.bench.prewarm import prewarm_path

    warm = prewarm_path(job.out, task.key)
    if warm.is_file():
        try:
            result["prewarm"] = json.loads(warm.read_text())
        except (OSError, ValueError):
            pass
    from torchweld.bench.prewarm import compiler_fingerprint, file_sha

    result["bench"] = {
        # NOTE: per result, as a resumed run mixes results of several sessions: the git commit can be stale
        # (a copied working tree) where this hash of the sources that judged (and compiled) it is not.
        "torchweld": compiler_fingerprint(),
        "candidate": str(task.candidate) if task.candidate else None,
        "candidate_sha": file_sha(task.candidate) if task.candidate and task.candidate.is_file() else None,
        "compiled": task.compile,
        "worker": worker,
        "gpu": gpu,
        "wall_s": round(time.monotonic() - started, 3),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    write_json(results_path(job.out, task.key), result)
    return result


def evaluate(task: Task, job: Job, worker: int | None = None, gpu: str | None = None) -> dict:
    """Compile (if asked) and judge one problem; every failure becomes a saved result, never an exception."""
    started = time.monotonic()
    if task.candidate is None:
        result = blank_result(task, NO_CANDIDATE, f"no candidate file for {task.rel} (looked for .py/.md/.txt)")
        return finish(task, result, job, started, worker, gpu)
    if task.compile and not _compiled_already(task, job):
        try:
            task.candidate.parent.mkdir(parents=True, exist_ok=True)
            written = _compiler(job)(task.problem, task.candidate)
            if written is not None and Path(written) != task.candidate:
                task = dataclasses.replace(task, candidate=Path(written))
        except Exception as e:
            result = blank_result(task, COMPILE_ERROR, one_line(e), _trace())
            return finish(task, result, job, started, worker, gpu)
    try:
        check, options = _judge(job, gpu)
        result = dict(check(task.problem, task.candidate, options))
    except Exception as e:
        from torchweld.problem import ProblemError

        if isinstance(e, ProblemError):
            result = blank_result(task, BAD_PROBLEM, one_line(e), _trace(limit=6))
        else:
            result = blank_result(task, JUDGE_ERROR, f"the judge raised {one_line(e)}", _trace())
    return finish(task, result, job, started, worker, gpu)


def worker_main(worker: int, gpu: str | None, tasks, conn, job: Job) -> None:
    """A worker process: pin to one GPU, then pull problems off the shared queue until a None arrives."""
    # Own session: Ctrl-C in the terminal reaches only the parent, which then stops the whole group;
    # otherwise a half-killed judge subprocess would be recorded (and later resumed) as a failure.
    try:
        os.setsid()
    except OSError:
        pass
    # NOTE: the one setting that stays in the environment: it selects the GPU for this process and every
    # judge it starts, so it is set before anything touches CUDA (the judge is imported only in _judge).
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    # The judge runs each candidate in a session of its own, which our group kill cannot reach:
    # on SIGTERM take every descendant down first, so nothing keeps running on the GPU.
    signal.signal(signal.SIGTERM, _die_with_descendants)
    _redirect_output(job.out / "logs" / f"worker{worker}.log")
    while True:
        task = tasks.get()
        if task is None:
            conn.send(("exit", worker, None, None))
            return
        conn.send(("start", worker, task.key, None))
        print(f"=== {task.label} ({datetime.now().isoformat(timespec='seconds')})", flush=True)
        result = evaluate(task, job, worker, gpu)
        print(f"=== {task.label}: {result['outcome']}: {result.get('message')}", flush=True)
        conn.send(("done", worker, task.key, result))


def make_options(cls, wanted: dict):
    """Build the judge's options from the settings it actually has, under whichever name it uses."""
    if cls is None:
        return SimpleNamespace(**wanted)
    if not dataclasses.is_dataclass(cls):
        return cls(**wanted)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in wanted.items():
        name = next((n for n in _ALIASES.get(key, (key,)) if n in names), None)
        if name is not None:
            kwargs[name] = value
    return cls(**kwargs)


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _judge(job: Job, gpu: str | None = None):
    wanted = {"timing": job.timing, **job.shared(gpu), **dict(job.judge)}
    if job.timeout is not None:
        wanted["timeout"] = job.timeout
    if job.check is not None:
        try:
            from torchweld.judge.parent import CheckOptions
        except ImportError:  # an injected check without the real judge installed (tests)
            CheckOptions = None
        return job.check, make_options(CheckOptions, wanted)
    from torchweld.judge.parent import CheckOptions, check

    return check, make_options(CheckOptions, wanted)


def _compiled_already(task: Task, job: Job) -> bool:
    """Prewarm compiled this candidate with the same compiler (the real compiler only: tests inject theirs)."""
    if job.compile_fn is not None or task.candidate is None:
        return False
    from torchweld.bench.prewarm import compiled_by_prewarm

    return compiled_by_prewarm(job.out, task.key, task.candidate)


def _compiler(job: Job):
    if job.compile_fn is not None:
        return job.compile_fn
    from torchweld.pipeline import compile_file

    return compile_file


def _trace(limit: int = 40) -> list[str]:
    lines = traceback.format_exc().rstrip().splitlines()
    return lines[-limit:]


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _die_with_descendants(signum, frame) -> None:
    for pid in descendants(os.getpid()):
        for kill in (os.killpg, os.kill):  # killpg reaches the judge's session leaders' own children too
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    os._exit(128 + signum)


def _redirect_output(log: Path) -> None:
    """Send this process's fds 1/2 (and so nvcc's and the judge's chatter) to a log, off the progress bar."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
