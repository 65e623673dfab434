"""The judge's trusted process: the stages in order -> a signed result. The candidate's code never runs here:
it runs in the candidate's process (candidate_process.py), which this process starts in its sandbox (remote.py,
sandbox.py) and talks to over one channel (channel.py).

The stages live one per file: build (through the candidate's process), correctness.py, generalisation.py,
timing.py (and offline.py, the build stage of a machine without a GPU, which the candidate's process runs and
which ends there); this file runs them in order and keeps the result, saved after every stage (so a crash or a
kill still says where it was): a signed JSON line down a pipe only the parent reads, signed with a key the
parent sent on stdin, which no file, argument or environment variable holds. The process is not dumpable, so
another process of the same user (the candidate's) cannot read that key from its memory.

Usage: python -m torchweld.judge.child PROBLEM CANDIDATE_SOURCE OPTIONS_JSON fd:N|RESULT_JSON  (key on stdin)
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import torch

from torchweld.judge import attribution, correctness, generalisation, quiet, sandbox, timing
from torchweld.judge.correctness import Pair, cheat, error_line
from torchweld.judge.check_options import CheckOptions
from torchweld.judge.guards import fp32_mode
from torchweld.judge.remote import CandidateError, Remote, RunnerDied
from torchweld.problem import ProblemError, load_problem

_REPO_ROOT = str(Path(__file__).resolve().parents[2])


def sign(key: bytes, result: dict) -> str:
    """The HMAC of a result as saved (sorted keys), which the parent checks."""
    return hmac.new(key, json.dumps(result, sort_keys=True).encode(), hashlib.sha256).hexdigest()


class Stop(Exception):
    """Judging ends here with the outcome already in the result."""


def sanitize(x):
    """JSON-safe: non-finite floats become None, tuples lists, anything odd its str()."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): sanitize(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [sanitize(v) for v in x]
    if x is None or isinstance(x, (bool, int, str)):
        return x
    return str(x)


class Judging:
    """One judging run in this process; `r` is the result, saved after every stage."""

    def __init__(self, problem_path: str, source_path: str, opts: CheckOptions, result_path: str,
                 key: bytes = b""):
        self.problem_path, self.source_path, self.opts = Path(problem_path), Path(source_path), opts
        # NOTE: "fd:N": the result goes down a pipe only the parent reads (the candidate's process neither
        # inherits it nor may open it through /proc: this process is not dumpable); else a file (tests).
        self.result_fd = int(result_path[3:]) if result_path.startswith("fd:") else None
        self.result_path, self.key = Path(result_path), key
        self.t0 = time.monotonic()  # the build-only stage bounds its compilers by the time left
        self.r = {"outcome": None, "message": "", "details": [], "stage": "start", "build_s": None,
                  "correctness": [], "generalization": [], "cheats": [], "timing": None, "device": None,
                  "torch": torch.__version__, "precision": None, "stage_s": {}, "buffers": [], "work": None,
                  "sandbox": None}
        self._stage_t0 = time.perf_counter()
        self._written: bytes | None = None
        self.remote: Remote | None = None

    # ---- bookkeeping -------------------------------------------------------------------------
    def save(self):
        forged = self._foreign_write()
        if forged:
            self.r["cheats"].append(forged)
            self.r["outcome"], self.r["message"] = "cheat", f"caught by forged_result: {forged['evidence']}"
        body = sanitize(self.r)
        if self.result_fd is not None:
            data = json.dumps({"result": body, "sig": sign(self.key, body)}).encode() + b"\n"
            while data:
                data = data[os.write(self.result_fd, data):]
            return
        text = json.dumps({"result": body, "sig": sign(self.key, body)}, indent=1).encode()
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_bytes(text)
        os.replace(tmp, self.result_path)
        self._written = text
        if forged:
            raise Stop

    def _foreign_write(self) -> dict | None:
        """Whether the result file holds something this process did not write (the candidate's own verdict)."""
        if self._written is None or self.result_fd is not None:
            return None
        if self.r["cheats"] and self.r["cheats"][-1]["check"] == "forged_result":
            return None
        try:
            now = self.result_path.read_bytes()
        except OSError:
            now = b""
        if now == self._written:
            return None
        return cheat("forged_result", "the result file was written by someone other than the judge (the "
                                      f"candidate's process, during {self.r['stage']}): {now[:120]!r}")

    def stage(self, name: str):
        self._close_stage()
        self.r["stage"] = name
        self.save()

    def _close_stage(self):
        """Wall seconds spent in the stage now ending (where a judge run's time goes)."""
        now = time.perf_counter()
        self.r["stage_s"][self.r["stage"]] = round(now - self._stage_t0, 3)
        self._stage_t0 = now

    def finish(self, outcome: str, message: str):
        self._close_stage()
        self.r["outcome"], self.r["message"] = outcome, message
        self.save()
        raise Stop

    def caught(self, cheats: list[dict], where: str):
        notes = [c for c in cheats if not c.get("caught", True)]
        self.r["details"] += [f"{c['check']}: {c['evidence']}" for c in notes]
        cheats = [c for c in cheats if c.get("caught", True)]
        if cheats:
            self.r["cheats"] += cheats
            c = cheats[0]
            self.finish("cheat", f"caught by {c['check']} ({where}): {c['evidence']}")

    def check_environment(self, where: str):
        """The candidate's process against its state before the import: clocks, precision flags, threads,
        child processes (also as this process sees them), the judge's modules, generators and hooks."""
        self.caught(self.remote.environment(where), where)

    # ---- the run -----------------------------------------------------------------------------
    def run(self):
        device = self.opts.device
        gpu = torch.cuda.is_available()
        with tempfile.TemporaryDirectory(prefix="torchweld-candidate-") as scratch:
            os.chmod(scratch, 0o755)
            offline_why = ("--build-only" if gpu else "no GPU") if device == "cuda" and (
                self.opts.build_only or not gpu) else None
            run_on = "cpu" if offline_why else device
            if device == "cpu":
                torch.set_num_threads(1)  # tests: as the candidate's process does, so the two compare
            self.remote = Remote(run_on, Path(scratch), _REPO_ROOT, self.opts.timeout_s,
                                 self.opts.candidate_memory_gb if run_on == "cpu" else 0.0)
            try:
                self.remote.start(sandbox.tiers())  # NOTE: its start-up overlaps this side's below
                if offline_why:
                    problem = load_problem(self.problem_path)
                    problem.init_inputs()
                    self.ready()
                    self.offline(offline_why)
                if device == "cuda":
                    torch.cuda.init()
                    self.r["device"] = torch.cuda.get_device_name()
                else:
                    self.r["device"] = "cpu"
                with fp32_mode(self.opts.allow_tf32) as precision:
                    self.r["precision"] = precision
                    self.stages()
            finally:
                self.remote.close()

    def ready(self):
        self.remote.ready()
        self.r["sandbox"] = sandbox.describe(self.remote.tier, pid=not self.remote.cuda)
        self.r["details"] += self.remote.notes

    def offline(self, why: str):
        """The build stage without a GPU, run in the candidate's process: its outcome can only be no_build,
        timeout or no_gpu, never a verdict on values."""
        self.stage("build")
        got = self.remote.request({"op": "offline", "problem_path": str(self.problem_path),
                                   "source_path": str(self.source_path), "opts": self.opts.to_json(),
                                   "why": why, "elapsed_s": time.monotonic() - self.t0,
                                   "log_dir": str(self.remote.scratch)})["result"]
        for k in ("details", "build", "build_s"):
            self.r[k] = (self.r[k] + got[k]) if k == "details" else got[k]
        outcome = got["outcome"] if got["outcome"] in ("no_build", "no_gpu", "timeout") else "runtime_error"
        self.finish(outcome, str(got["message"]))

    def stages(self):
        """Every stage in order, under the options' fp32 precision."""
        problem = load_problem(self.problem_path)
        init_args = problem.init_inputs()
        if self.opts.device == "cuda":
            torch.zeros(1, device="cuda")
        self.ready()

        self.stage("build")
        source = self.source_path.read_text()
        self.remote.import_candidate(self.source_path, self.remote.scratch / "build.log", self.opts.allow_tf32)
        # NOTE: torch.compile of the reference needs the CPU more than the GPU; it runs while the candidate's
        # process imports (and builds) the candidate, and before `take_gpu`.
        compiled = timing.compile_reference(self, problem, init_args) if self.opts.timing else None
        got = self.remote.receive()
        if "build_error" in got:
            e = got["build_error"]
            self.r["build_s"] = e["seconds"]
            self.r["details"] += e["details"]
            self.finish("no_build", e["message"])
        self.r["build_s"] = got["build_s"]
        if self.opts.anti_cheat:
            self.check_environment("after import")
        attribution.require(self, source)

        self.stage("weights")
        try:
            pair = Pair(problem, self.remote, init_args, {}, self.opts.seed, self.opts.tolerance == "oracle")
        except CandidateError as e:
            self.finish("runtime_error", f"constructing the models failed: {e}")
        self.r["details"] += pair.notes
        if self.opts.anti_cheat:
            self.check_environment("after construction")
        self.take_gpu()
        with torch.no_grad():
            correctness.stage(self, problem, pair, source)
            generalisation.stage(self, problem, pair, init_args)
            if self.opts.timing:
                timing.stage(self, problem, pair, compiled)
        self.finish("correct", self.summary())

    def take_gpu(self):
        """Where the bench runs several judges on one GPU, wait for the GPU's lock and hold it to the end
        (the process exits without releasing it otherwise: os._exit closes the file)."""
        if not self.opts.gpu_lock:
            return
        import fcntl

        self.stage("waiting for the GPU")
        self._gpu_lock = open(self.opts.gpu_lock, "a")
        fcntl.flock(self._gpu_lock, fcntl.LOCK_EX)

    def summary(self) -> str:
        n, g, t = len(self.r["correctness"]), len(self.r["generalization"]), self.r["timing"]
        msg = f"correct on {n} trials and {g} generalisation variants"
        if t:
            msg += f"; {t['candidate_ms']:.3f} ms vs eager {t['eager_ms']:.3f} ms ({t['speedup_vs_eager']:.2f}x)"
            if t.get("speedup_vs_compile"):
                msg += f", vs torch.compile {t['compile_ms']:.3f} ms ({t['speedup_vs_compile']:.2f}x)"
        return msg


def judge(argv: list[str], key: bytes = b"") -> dict:
    """Judge as the arguments say, saving the signed result file; returns the result."""
    problem_path, source_path, opts_arg, result_path = argv
    opts = CheckOptions.from_json(Path(opts_arg).read_text() if os.path.isfile(opts_arg) else opts_arg)
    registered = quiet.register(opts.judges_dir)  # where the bench runs judges side by side: pausable
    j = Judging(problem_path, source_path, opts, result_path, key)

    def ended(signum, frame):  # the parent's time limit: the candidate's processes go first, then this one
        raise RunnerDied(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, ended)
    try:
        j.run()
    except Stop:
        pass
    except ProblemError as e:
        j.r.update(fatal="problem", message=str(e))
        _save(j)
    except RunnerDied as e:
        if j.r["outcome"] is None and "stopped by signal" not in str(e):
            j.r["outcome"] = "runtime_error"
            j.r["message"] = f"{e} during {j.r['stage']}"
        _save(j)
    except Exception as e:  # noqa: BLE001 - the candidate's errors become a runtime_error result
        j.r["outcome"] = "runtime_error"
        what = str(e) if isinstance(e, CandidateError) else f"{type(e).__name__}: {error_line(e)}"
        j.r["message"] = f"during {j.r['stage']}: {what}"
        _save(j)
    finally:
        quiet.unregister(registered)
    return j.r


def _save(j: Judging) -> None:
    try:
        j.save()
    except Stop:
        pass


def main(argv: list[str]) -> int:
    sandbox.nondumpable()  # NOTE: before the key is read: the candidate's process may never read our memory
    sandbox.subreaper()  # a daemon the candidate starts comes back here, and is killed with the rest
    key = sys.stdin.buffer.readline().strip()
    judge(argv, key)
    sys.stdout.flush()
    # NOTE: skip interpreter teardown: a broken CUDA context can hang or crash it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
