"""The judge's child process, where the candidate runs: the stages in order -> result JSON.

The stages live one per file: build.py, correctness.py, generalisation.py, timing.py (and offline.py,
the build stage of a machine without a GPU, which ends there); this file runs
them in order, keeps the result (saved after every stage, so a crash or a kill still says where it
was) and compares the process's clocks, flags, threads and children with their state before the
candidate was imported.

Usage: python -m torchweld.judge.child PROBLEM CANDIDATE_SOURCE OPTIONS_JSON RESULT_JSON
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from torchweld.judge import correctness, generalisation, guards, offline, quiet, timing
from torchweld.judge.build import BuildError, import_candidate
from torchweld.judge.correctness import Pair, cheat, error_line
from torchweld.judge.check_options import CheckOptions
from torchweld.problem import ProblemError, load_problem


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

    def __init__(self, problem_path: str, source_path: str, opts: CheckOptions, result_path: str):
        # NOTE: first thing, before any candidate code exists: the judge times with these, and checks them later.
        self.clocks = guards.RealClocks()
        self.problem_path, self.source_path, self.opts = Path(problem_path), Path(source_path), opts
        self.result_path = Path(result_path)
        self.t0 = time.monotonic()  # the build-only stage bounds its compilers by the time left
        self.r = {"outcome": None, "message": "", "details": [], "stage": "start", "build_s": None,
                  "correctness": [], "generalization": [], "cheats": [], "timing": None, "device": None,
                  "torch": torch.__version__, "precision": None, "stage_s": {}, "buffers": []}
        self._stage_t0 = self.clocks.perf_counter()

    # ---- bookkeeping -------------------------------------------------------------------------
    def save(self):
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(sanitize(self.r), indent=1))
        os.replace(tmp, self.result_path)

    def stage(self, name: str):
        self._close_stage()
        self.r["stage"] = name
        self.save()

    def _close_stage(self):
        """Wall seconds spent in the stage now ending (where a judge run's time goes)."""
        now = self.clocks.perf_counter()
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

    def baseline(self):
        """The precision flags, threads and child processes to compare with later (`check_environment`)."""
        self.flags0, self.threads0, self.kids0 = guards.precision_flags(), guards.thread_count(), guards.child_pids()

    def check_environment(self, where: str):
        """Clocks, precision flags, threads and child processes against their state before the import."""
        found = []
        changed = self.clocks.changed()
        if changed:
            found.append(cheat("timer_patch", f"{where}: replaced {', '.join(changed[:4])}"))
        flags = guards.precision_flags()
        diff = {k: (self.flags0[k], v) for k, v in flags.items() if self.flags0.get(k) != v}
        if diff:
            found.append(cheat("tf32_flags", f"{where}: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items())))
        threads = guards.thread_count()
        if threads > self.threads0:
            found.append(cheat("threads", f"{where}: {threads - self.threads0} more Python thread(s) alive "
                                          f"({self.threads0} -> {threads})"))
        kids = guards.child_pids() - self.kids0
        if kids:
            found.append(cheat("subprocess", f"{where}: {len(kids)} child process(es) alive: pids {sorted(kids)[:4]}"))
        self.caught(found, where)

    # ---- the run -----------------------------------------------------------------------------
    def run(self):
        gpu = torch.cuda.is_available()
        if self.opts.build_only or not gpu:
            problem = load_problem(self.problem_path)
            problem.init_inputs()
            offline.stage(self, problem, "--build-only" if gpu else "no GPU")
        torch.cuda.init()
        self.r["device"] = torch.cuda.get_device_name()
        with guards.fp32_mode(self.opts.allow_tf32) as precision:
            self.r["precision"] = precision
            self.stages()

    def stages(self):
        """Every stage in order, under the options' fp32 precision."""
        problem = load_problem(self.problem_path)
        init_args = problem.init_inputs()
        torch.zeros(1, device="cuda")
        self.baseline()

        self.stage("build")
        source = self.source_path.read_text()
        try:
            module, secs = import_candidate(self.source_path, source, self.result_path.with_name("build.log"))
        except BuildError as e:
            self.r["build_s"] = e.seconds
            self.r["details"] += e.details
            self.finish("no_build", e.message)
        self.r["build_s"] = secs
        if self.opts.anti_cheat:
            self.check_environment("after import")

        self.stage("weights")
        try:
            pair = Pair(problem, module.ModelNew, init_args, {}, self.opts.seed, self.opts.tolerance == "oracle")
        except Exception as e:  # noqa: BLE001
            self.finish("runtime_error", f"constructing the models failed: {type(e).__name__}: {error_line(e)}")
        self.r["details"] += pair.notes
        if self.opts.anti_cheat:
            self.check_environment("after construction")
        # NOTE: torch.compile needs the CPU more than the GPU, so it runs before `take_gpu`.
        compiled = timing.compile_reference(self, problem, pair) if self.opts.timing else None
        self.take_gpu()
        with torch.no_grad():
            correctness.stage(self, problem, pair, source)
            generalisation.stage(self, problem, pair, init_args, module.ModelNew)
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


def judge(argv: list[str]) -> dict:
    """Judge as the arguments say, saving the result file; returns the result."""
    problem_path, source_path, opts_arg, result_path = argv
    opts = CheckOptions.from_json(Path(opts_arg).read_text() if os.path.isfile(opts_arg) else opts_arg)
    registered = quiet.register(opts.judges_dir)  # where the bench runs judges side by side: pausable
    j = Judging(problem_path, source_path, opts, result_path)
    try:
        j.run()
    except Stop:
        pass
    except ProblemError as e:
        j.r.update(fatal="problem", message=str(e))
        j.save()
    except Exception as e:  # noqa: BLE001 - CUDA errors and candidate crashes become a runtime_error result
        j.r["outcome"] = "runtime_error"
        j.r["message"] = f"during {j.r['stage']}: {type(e).__name__}: {error_line(e)}"
        j.save()
    finally:
        quiet.unregister(registered)
    return j.r


def main(argv: list[str]) -> int:
    judge(argv)
    sys.stdout.flush()
    # NOTE: skip interpreter teardown: a candidate's threads or a broken CUDA context can hang or crash it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
