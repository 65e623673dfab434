"""Run tasks on one spawned worker process per GPU, fed from a shared queue; survive worker deaths and hangs."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Callable

from torchweld.bench.tasks import Task
from torchweld.bench.worker import Job, blank_result, evaluate, finish, worker_main

# on_start(worker, task) and on_done(worker, task, result): how the progress display hears of work.
Hooks = tuple[Callable[[int, Task], None], Callable[[int, Task, dict], None]]


class WorkerStartupError(RuntimeError):
    """A worker died before taking any problem: retrying would fail the same way for every problem."""


@dataclass
class _Worker:
    # Mutable on purpose: this is the parent's live view of one child process.
    proc: object
    conn: object
    gpu: str | None
    current: Task | None = None
    started: float = 0.0
    said_exit: bool = False


def run_inline(tasks: list[Task], job: Job, hooks: Hooks) -> None:
    """Judge in this process, one after another (tests, debugging): no isolation, no GPU pinning."""
    on_start, on_done = hooks
    for task in tasks:
        on_start(0, task)
        on_done(0, task, evaluate(task, job, 0, None))


def run_pool(tasks: list[Task], job: Job, slots: list[str | None], hooks: Hooks, hard_limit: float | None) -> None:
    """One worker per slot (a GPU id, or None for unpinned); returns when every task has a saved result."""
    on_done = hooks[1]
    ctx = mp.get_context("spawn")  # fork would copy a parent that may hold CUDA or rich's threads
    queue = ctx.Queue()
    for task in tasks:
        queue.put(task)
    for _ in slots:
        queue.put(None)  # one stop sign per worker; a replacement inherits its dead predecessor's
    by_key = {t.key: t for t in tasks}
    workers = {wid: _spawn(ctx, wid, gpu, queue, job) for wid, gpu in enumerate(slots)}
    done: set[str] = set()
    try:
        while len(done) < len(tasks):
            if not workers:
                raise WorkerStartupError(f"all workers exited with {len(tasks) - len(done)} problems left")
            conns = {w.conn: wid for wid, w in workers.items()}
            sentinels = {w.proc.sentinel: wid for wid, w in workers.items()}
            ready = wait(list(conns) + list(sentinels), timeout=0.5)
            for obj in ready:
                if obj in conns:
                    _drain(workers[conns[obj]], conns[obj], by_key, done, hooks)
            for wid in [sentinels[o] for o in ready if o in sentinels]:
                w = workers[wid]
                _drain(w, wid, by_key, done, hooks)  # a last "done" may still sit in the pipe
                if not w.said_exit:  # died abruptly: whatever it started in its own group goes too
                    _kill(w.proc, signal.SIGKILL)
                w.proc.join()
                del workers[wid]
                if w.current is not None:
                    why = f"the worker process died (exit code {w.proc.exitcode}) while judging this problem"
                    _record(w, wid, "runtime_error", why, job, done, on_done)
                    workers[wid] = _spawn(ctx, wid, w.gpu, queue, job)
                elif not w.said_exit:
                    raise WorkerStartupError(f"worker {wid} died before taking a problem (exit code {w.proc.exitcode});"
                                             f" see {job.out / 'logs' / f'worker{wid}.log'}")
            now = time.monotonic()
            for wid, w in list(workers.items()):
                if hard_limit and w.current is not None and now - w.started > hard_limit:
                    _kill(w.proc, signal.SIGTERM)  # its handler kills the judge's runs, then exits
                    w.proc.join(timeout=10)
                    if w.proc.is_alive():
                        _kill(w.proc, signal.SIGKILL)
                        w.proc.join()
                    why = f"the bench killed it after {hard_limit:.0f} s (the judge's own timeout never fired)"
                    _record(w, wid, "timeout", why, job, done, on_done)
                    workers[wid] = _spawn(ctx, wid, w.gpu, queue, job)
    finally:
        _stop(workers.values(), graceful=len(done) == len(tasks))
        queue.cancel_join_thread()  # leftover tasks after Ctrl-C must not block our exit
        queue.close()


def _spawn(ctx, wid: int, gpu: str | None, queue, job: Job) -> _Worker:
    recv, send = ctx.Pipe(duplex=False)
    # Not a daemon: the judge may start processes of its own, which daemons may not.
    proc = ctx.Process(target=worker_main, args=(wid, gpu, queue, send, job), name=f"torchweld-bench-{wid}")
    proc.start()
    send.close()  # so recv sees EOF once the child is gone
    return _Worker(proc, recv, gpu)


def _drain(w: _Worker, wid: int, by_key: dict, done: set, hooks: Hooks) -> None:
    on_start, on_done = hooks
    while True:
        try:
            if not w.conn.poll():
                return
            kind, _, key, result = w.conn.recv()
        except (EOFError, OSError):
            return
        if kind == "start":
            w.current, w.started = by_key[key], time.monotonic()
            on_start(wid, w.current)
        elif kind == "done":
            task, w.current = by_key[key], None
            done.add(key)
            on_done(wid, task, result)
        elif kind == "exit":
            w.said_exit = True


def _record(w: _Worker, wid: int, outcome: str, why: str, job: Job, done: set, on_done) -> None:
    """Save a result for the problem a lost worker was on, so resume and reports see it."""
    task = w.current
    result = finish(task, blank_result(task, outcome, why), job, w.started, wid, w.gpu)
    done.add(task.key)
    on_done(wid, task, result)


def _kill(proc, sig) -> None:
    """Signal the worker's whole process group (it called setsid), so nvcc and judge children go too."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            os.kill(proc.pid, sig)
        except (ProcessLookupError, OSError):
            pass


def _stop(workers, graceful: bool) -> None:
    workers = list(workers)
    if graceful:  # every worker has its stop sign; give them a moment to leave on their own
        for w in workers:
            w.proc.join(timeout=10)
    for w in workers:
        if w.proc.is_alive():
            _kill(w.proc, signal.SIGTERM)
    for w in workers:
        w.proc.join(timeout=5)
        if w.proc.is_alive():
            _kill(w.proc, signal.SIGKILL)
            w.proc.join(timeout=5)
        w.conn.close()
