"""The judge as a pluggable callable, run in per-GPU slots; a crash or a hang comes back as a result.

A judge is `judge(problem, candidate, slot) -> result dict`, `slot` saying where it runs (the GPU it is pinned to,
the lock and registry it shares with the judges beside it). The default runs `torchweld.judge.check` in a child process of its own (this module's `main`),
so each slot has its own CUDA_VISIBLE_DEVICES, as the bench's workers do, and so the API key is not in the
environment of the process that runs the model's code. Tests pass an in-process callable instead.

Usage of the child: python -m torchweld.agent.judging PROBLEM CANDIDATE OPTIONS_JSON RESULT_JSON
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

Judge = Callable[[Path, Path, dict], dict]
JUDGE_ERROR = "judge_error"  # the agent's outcome for a judge that crashed or hung: not the candidate's fault


@dataclass(frozen=True)
class Slot:
    """Where one judge runs: the GPU it is pinned to, and what it shares with judges beside it (as the bench's workers)."""

    gpu: str | None  # a CUDA_VISIBLE_DEVICES value, or None (unpinned)
    lock: Path | None = None  # a lock file shared by the judges of one GPU (--per-gpu > 1)
    judges: Path | None = None  # where judges running side by side register, so the one timing pauses the others

    def env(self) -> dict:
        """The judge process's environment overrides: the GPU it sees."""
        return {"CUDA_VISIBLE_DEVICES": self.gpu} if self.gpu is not None else {}

    def options(self) -> dict:
        """The judge's option overrides (CheckOptions fields): the GPU's lock and the judges' registry."""
        out = {}
        if self.lock is not None:  # the judge holds the GPU's lock while it runs there
            out["gpu_lock"] = str(self.lock)
        if self.judges is not None:  # judges register here; the one timing pauses the others
            out["judges_dir"] = str(self.judges)
        return out


def make_slots(gpus: list[str], per_gpu: int, lock_dir: Path) -> list[Slot]:
    """per_gpu slots for each GPU (one unpinned GPU when none is visible); a shared lock where per_gpu > 1."""
    out, several = [], len(gpus or [None]) * per_gpu > 1
    if several:
        (lock_dir / "judges").mkdir(parents=True, exist_ok=True)
    for gpu in gpus or [None]:
        lock = lock_dir / f"gpu{gpu if gpu is not None else ''}.lock" if per_gpu > 1 else None
        out += [Slot(gpu, lock, lock_dir / "judges" if several else None) for _ in range(per_gpu)]
    return out


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES would name them (no CUDA context is made)."""
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch CUDA at all
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in env.split(",") if d.strip()] if env is not None else [str(i) for i in range(count)]
    return ids[:count]


def error_result(problem: Path, candidate: Path, message: str) -> dict:
    return {"problem": str(problem), "name": problem.stem, "candidate": str(candidate), "outcome": JUDGE_ERROR,
            "message": message, "details": [], "correctness": [], "generalization": [], "cheats": [],
            "static": [], "timing": None}


class SubprocessJudge:
    """The real judge in a child process with the slot's environment, minus the API key's variable."""

    def __init__(self, check_options=None, hide_env: tuple[str, ...] = (), limit_s: float | None = None,
                 require_kernel: bool = True):
        from dataclasses import replace

        from torchweld.judge import CheckOptions

        # NOTE: the agent asks for custom kernels: an answer with none of its own is `no_kernel`.
        self.opts = replace(check_options or CheckOptions(), require_kernel=require_kernel)
        self.hide = set(hide_env)
        # NOTE: the judge bounds its own run by timeout_s; this only catches a hang outside it.
        self.limit_s = limit_s or 2 * float(getattr(self.opts, "timeout_s", 600.0)) + 120.0
        self.live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def child_env(self, env: dict) -> dict:
        """This process's environment without the key (under any name), plus the slot's overrides."""
        secret = {os.environ.get(k) for k in self.hide} - {None, ""}
        out = {k: v for k, v in os.environ.items() if k not in self.hide and v not in secret}
        out.update(env)
        root = str(Path(__file__).resolve().parents[2])
        out["PYTHONPATH"] = os.pathsep.join(p for p in (root, out.get("PYTHONPATH")) if p)
        return out

    def __call__(self, problem: Path, candidate: Path, slot: Slot) -> dict:
        child_env = self.child_env(slot.env())
        opts = replace(self.opts, **slot.options())
        with tempfile.TemporaryDirectory(prefix="torchweld-agent-judge-") as tmp:
            opts_path, result_path = Path(tmp) / "options.json", Path(tmp) / "result.json"
            opts_path.write_text(json.dumps(asdict(opts)))
            cmd = [sys.executable, "-m", "torchweld.agent.judging", str(problem), str(candidate), str(opts_path),
                   str(result_path)]
            # NOTE: a session of its own: Ctrl-C in the terminal reaches only the agent, which stops it.
            proc = subprocess.Popen(cmd, env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
            with self._lock:
                self.live.add(proc)
            try:
                _, err = proc.communicate(timeout=self.limit_s)
            except subprocess.TimeoutExpired:
                stop(proc)
                return error_result(problem, candidate, f"the judge gave no result within {self.limit_s:g} s")
            finally:
                with self._lock:
                    self.live.discard(proc)
            try:
                return json.loads(result_path.read_text())
            except (OSError, ValueError):
                tail = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()][-1:]
                return error_result(problem, candidate, f"the judge process exited with code {proc.returncode}"
                                    + (f": {tail[0][:300]}" if tail else ""))

    def stop_all(self):
        """Stop every judge still running (Ctrl-C): each takes its own children down first."""
        with self._lock:
            procs = list(self.live)
        for p in procs:
            stop(p)


def stop(proc: subprocess.Popen, grace_s: float = 5.0):
    """SIGTERM (the child kills the judge's worker, which runs in a session of its own), then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()


class JudgePool:
    """`judge(problem, candidate) -> result`: waits for a free slot, never raises, never waits forever."""

    def __init__(self, judge: Judge, slots: list[Slot], limit_s: float):
        self.judge, self.limit_s = judge, limit_s
        self.free: queue.Queue = queue.Queue()
        for s in slots:
            self.free.put(s)

    def __call__(self, problem: Path, candidate: Path) -> dict:
        slot = self.free.get()
        box: dict = {}

        def run():
            try:
                box["result"] = self.judge(problem, candidate, slot)
            except BaseException as e:  # noqa: BLE001 - a crashed judge is a result, never the end of the loop
                box["error"] = f"{type(e).__name__}: {e}"

        t = threading.Thread(target=run, daemon=True, name=f"judge {candidate.name}")
        t0 = time.monotonic()
        t.start()
        t.join(self.limit_s)
        # NOTE: the slot is given back even after a hang: a stuck thread must not stall every conversation.
        self.free.put(slot)
        if t.is_alive():
            return error_result(problem, candidate, f"the judge gave no result within {self.limit_s:g} s")
        if "error" in box:
            return error_result(problem, candidate, f"the judge crashed: {box['error'][:300]}")
        result = box.get("result")
        if not isinstance(result, dict) or "outcome" not in result:
            return error_result(problem, candidate, f"the judge returned {type(result).__name__}, not a result")
        result.setdefault("judge_s", round(time.monotonic() - t0, 3))
        return result


def _die_with_children(signum, frame):
    """SIGTERM: take the judge's worker (own session) and its children down, then exit."""
    for pid in _descendants(os.getpid()):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(143)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, read from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def main(argv: list[str]) -> int:
    """The child: one `torchweld.judge.check`, its result written as JSON."""
    signal.signal(signal.SIGTERM, _die_with_children)
    problem, candidate, opts_path, result_path = argv
    from dataclasses import fields

    from torchweld.judge import CheckOptions, check

    known = {f.name for f in fields(CheckOptions)}
    opts = CheckOptions(**{k: v for k, v in json.loads(Path(opts_path).read_text()).items() if k in known})
    try:
        result = check(problem, candidate, opts)
    except Exception as e:  # noqa: BLE001 - an unusable problem or file: the agent reports it as a judge error
        result = error_result(Path(problem), Path(candidate), f"{type(e).__name__}: {str(e)[:300]}")
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
