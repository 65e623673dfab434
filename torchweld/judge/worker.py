"""The judge's child process: build, weights, correctness, generalisation, anti-cheat, timing -> result JSON.

Usage: python -m torchweld.judge.worker PROBLEM CANDIDATE_SOURCE OPTIONS_JSON RESULT_JSON
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
from pathlib import Path

import torch

from torchweld.judge import guards, quiet
from torchweld.judge.build import BuildError, import_candidate, kernel_names
from torchweld.judge.options import CheckOptions
from torchweld.judge.tolerance import compare
from torchweld.judge.trials import Pair, cheat, kernel_check, run_trial, stream_probe, to_cuda
from torchweld.judge.variants import all_variants, reshape_inputs
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


class Worker:
    """One judging run in this process; `r` is the result, saved after every stage."""

    def __init__(self, problem_path: str, source_path: str, opts: CheckOptions, result_path: str):
        # NOTE: first thing, before any candidate code exists: the judge times with these, and checks them later.
        self.clocks = guards.RealClocks()
        self.problem_path, self.source_path, self.opts = Path(problem_path), Path(source_path), opts
        self.result_path = Path(result_path)
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

    def env_check(self, where: str):
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

    # ---- stages ------------------------------------------------------------------------------
    def run(self):
        if not torch.cuda.is_available():
            self.finish("runtime_error", "no CUDA device: the judge needs a GPU")
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
        self.flags0, self.threads0, self.kids0 = guards.precision_flags(), guards.thread_count(), guards.child_pids()

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
            self.env_check("after import")

        self.stage("weights")
        try:
            pair = Pair(problem, module.ModelNew, init_args, {}, self.opts.seed, self.opts.tolerance == "oracle")
        except Exception as e:  # noqa: BLE001
            self.finish("runtime_error", f"constructing the models failed: {type(e).__name__}: {_line(e)}")
        self.r["details"] += pair.notes
        if self.opts.anti_cheat:
            self.env_check("after construction")
        compiled = self.compile_reference(pair, problem) if self.opts.timing else None
        self.take_gpu()
        with torch.no_grad():
            self.correctness(problem, pair, source)
            self.generalization(problem, pair, init_args, module.ModelNew)
            if self.opts.timing:
                self.timing(problem, pair, compiled)
        self.finish("correct", self.summary())

    def compile_reference(self, pair, problem):
        """torch.compile of the original, before any timing, so that all three can be timed interleaved;
        (compiled or None, seconds, error). It needs CPU more than GPU, so it runs before `take_gpu`.
        Its first call's effect on buffers (a training batch norm's statistics) is undone."""
        from torchweld.judge.timing import compile_model

        self.stage("torch.compile")
        torch.manual_seed(self.opts.seed * 1000 + 501)
        sample = to_cuda(problem.inputs())
        saved = {k: b.clone() for k, b in pair.ref.named_buffers()}
        result = compile_model(pair.ref, self.opts.compile_mode, sample, self.clocks)
        with torch.no_grad():
            for k, b in pair.ref.named_buffers():
                b.copy_(saved[k])
        # NOTE: Inductor's compile workers are not the candidate's: the thread/process baseline is taken
        # again (everything the candidate started before this point was checked just above).
        self.threads0, self.kids0 = guards.thread_count(), guards.child_pids()
        return result

    def take_gpu(self):
        """Where the bench runs several judges on one GPU, wait for the GPU's lock and hold it to the end
        (the process exits without releasing it otherwise: os._exit closes the file)."""
        path = self.opts.gpu_lock
        if not path:
            return
        import fcntl

        self.stage("waiting for the GPU")
        self._gpu_lock = open(path, "a")
        fcntl.flock(self._gpu_lock, fcntl.LOCK_EX)

    def correctness(self, problem, pair, source):
        self.stage("correctness")
        cand_in, out = None, None
        for t in range(self.opts.trials):
            torch.manual_seed(self.opts.seed * 1000 + 1 + t)
            cpu = problem.inputs()
            verdict, cheats, cand_in, out = run_trial(pair, cpu, f"trial {t + 1} (seed {self.opts.seed * 1000 + 1 + t})",
                                                      self.opts, reuse=cand_in, prev_out=out,
                                                      anti_cheat=self.opts.anti_cheat)
            self.r["correctness"].append(verdict)
            self.caught(cheats, f"correctness trial {t + 1}")
            if not verdict["ok"]:
                self.finish("wrong", f"wrong output on trial {t + 1}: {verdict['why']}")
        self.check_buffers(pair, f"after {self.opts.trials} trials")
        if pair.oracle_error:
            self.r["details"].append(f"float64 oracle unavailable ({pair.oracle_error}); the dtype table decided")
        if self.opts.anti_cheat:
            # NOTE: never-seen inputs, so a result cache cannot hide whether the candidate's own kernels run.
            torch.manual_seed(self.opts.seed * 1000 + 99)
            fresh = to_cuda(problem.inputs())
            self.caught(kernel_check(pair, fresh, kernel_names(source), problem.model_cls), "profiled forward")
            self.caught(stream_probe(pair, fresh, self.opts.stream_probes), "stream probe")
            self.env_check("after the correctness calls")

    def check_buffers(self, pair, when: str):
        """Running statistics (and every other buffer) of the candidate against the original's, after
        the same calls on the same inputs: a batch norm in training mode must update them as PyTorch does."""
        verdict = compare_buffers(pair.ref, pair.cand, when)
        if verdict is None:
            return
        self.r["buffers"].append(verdict)
        if not verdict["ok"]:
            self.finish("wrong", f"buffers differ {when}: {verdict['why']}")

    def other_mode(self, problem, pair, init_args, cand_cls):
        """The model in the other mode (training <-> eval) where a norm keeps running statistics: the
        original and the candidate both switched, run on fresh inputs, and their buffers compared."""
        to_eval = mode_variant(pair.ref)
        if to_eval is None:
            return
        label = "eval mode" if to_eval else "training mode"
        seed = self.opts.seed * 1000 + 91
        try:
            vpair = Pair(problem, cand_cls, init_args, {}, seed, pair.use_oracle)
        except Exception as e:  # noqa: BLE001
            self.r["generalization"].append(_failed(label, f"ModelNew raised {_line(e)}"))
            return
        calls = []
        if to_eval:  # one training call first, so the running statistics are not the fresh ones
            calls.append(("training mode, then", False))
        calls += [(label, to_eval), (label, to_eval)]
        for k, (what, eval_now) in enumerate(calls):
            vpair.ref.train(not eval_now)
            vpair.cand.train(not eval_now)
            torch.manual_seed(seed + 1 + k)
            try:
                verdict, cheats, _, _ = run_trial(vpair, problem.inputs(), f"{what} (call {k + 1})", self.opts,
                                                  anti_cheat=self.opts.anti_cheat)
            except Exception as e:  # noqa: BLE001
                _cuda_alive()
                verdict, cheats = _failed(label, f"candidate raised {type(e).__name__}: {_line(e)}"), []
            self.r["generalization"].append(verdict)
            self.caught(cheats, label)
            if not verdict["ok"]:
                break
        else:
            self.check_buffers(vpair, f"in {label}")
        self.save()

    def generalization(self, problem, pair, init_args, cand_cls):
        if not self.opts.generalize:
            return
        self.stage("generalization")
        self.other_mode(problem, pair, init_args, cand_cls)
        torch.manual_seed(self.opts.seed)
        base = problem.inputs()
        for k, v in enumerate(all_variants(problem.model_cls, base, init_args, self.opts.max_variants)):
            seed = self.opts.seed * 1000 + 101 + k
            vpair = pair
            if v.init_kwargs or list(v.init_args) != list(init_args):
                try:
                    torch.manual_seed(seed)
                    problem.model_cls(*v.init_args, **v.init_kwargs)
                except Exception as e:  # noqa: BLE001 - not a valid configuration of the original
                    self.r["details"].append(f"generalisation {v.label} skipped: the original rejects it ({_line(e)})")
                    continue
                try:
                    vpair = Pair(problem, cand_cls, v.init_args, v.init_kwargs, seed, pair.use_oracle)
                except Exception as e:  # noqa: BLE001
                    self.r["generalization"].append(_failed(v.label, f"ModelNew({v.label}) raised {_line(e)}"))
                    continue
            torch.manual_seed(seed)
            inputs = reshape_inputs(problem.inputs(), v, torch.Generator().manual_seed(seed),
                                    max_batch=2 if vpair is not pair else None)
            try:
                vpair.ref(*to_cuda(inputs))
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                _cuda_alive()
                self.r["details"].append(f"generalisation {v.label} skipped: the original fails on it ({_line(e)})")
                continue
            try:
                verdict, cheats, _, _ = run_trial(vpair, inputs, v.label, self.opts, anti_cheat=self.opts.anti_cheat)
            except Exception as e:  # noqa: BLE001
                _cuda_alive()
                verdict, cheats = _failed(v.label, f"candidate raised {type(e).__name__}: {_line(e)}"), []
            self.r["generalization"].append(verdict)
            self.caught(cheats, f"generalisation {v.label}")
            self.save()
        bad = [g for g in self.r["generalization"] if not g["ok"]]
        if bad:
            self.finish("wrong", f"fails generalisation on {', '.join(g['inputs'] for g in bad)}: {bad[0]['why']}")

    def timing(self, problem, pair, compiled_ref):
        from torchweld.judge.timing import Timer

        self.stage("timing")
        o = self.opts
        if o.anti_cheat:
            self.env_check("before timing")
        timer = Timer(self.clocks, o.timing_runs, o.timing_min_s, o.timing_max_runs)
        sets = []
        for s in range(o.timing_sets):
            torch.manual_seed(o.seed * 1000 + 501 + s)
            sets.append(to_cuda(problem.inputs()))
        compiled, secs, err = compiled_ref
        if compiled is None:
            self.r["details"].append(f"torch.compile({o.compile_mode}) failed: {err}")
        fns = {"eager": pair.ref, "candidate": pair.cand}
        if compiled is not None:
            fns["compile"] = compiled
        # NOTE: other judges of the bench paused meanwhile: the host's speed is part of a launch-bound time.
        with quiet.quiet(o.judges_dir) as paused:
            timed = timer.interleaved(fns, sets)
            eager, cand = timed["eager"], timed["candidate"]
            cand_ms = cand.median
            t = {"eager_ms": eager.median, "compile_ms": None, "candidate_ms": cand_ms, "compile_build_s": secs,
                 "speedup_vs_eager": eager.median / cand_ms if cand_ms else None, "speedup_vs_compile": None,
                 "candidate_ms_repeat": cand.half_median(), "method": timer.method(len(sets)), "runs": len(cand.times)}
            if compiled is not None:
                t["compile_ms"] = timed["compile"].median
                t["speedup_vs_compile"] = t["compile_ms"] / cand_ms if cand_ms else None
            t["judges_paused"] = len(paused)
            self.r["timing"] = t
            ref_last, cand_last = eager.last, cand.last
            del timed, eager, cand
            if o.anti_cheat:
                self.timing_checks(problem, pair, timer, sets, ref_last, cand_last, cand_ms, t)
                self.env_check("after timing the candidate")
            del ref_last, cand_last

    def timing_checks(self, problem, pair, timer, sets, ref_last, cand_last, cand_ms, t):
        """Timed outputs still right; event time vs wall time; fresh inputs as fast as rotating ones."""
        for k, (c, r) in enumerate(zip(cand_last, ref_last)):
            v = compare(c, r, mode="kernelbench")
            if v["rel"] is None or v["rel"] > 2e-2 or "NaN" in v["why"]:
                self.caught([cheat("input_cache", f"the output of the last timed call on input set {k} is wrong "
                                                  f"(rel error {v['rel']}): a cached or stale result")], "timing")
        wall, ev = timer.wall_and_events(pair.cand, sets[0])
        t["wall_ms"], t["event_ms"] = wall, ev
        if wall > 2 * ev + 0.2:
            self.caught([cheat("stream_timing", f"CUDA events on the caller's stream see {ev:.3f} ms but call + "
                                                f"device-wide synchronize takes {wall:.3f} ms: work runs on "
                                                "another stream")], "timing")
        # Never-seen inputs against already-seen ones, timed in pairs under the same conditions: each call
        # starts from an idle GPU, and which of the two goes first alternates.
        found = self.fresh_vs_seen(problem, pair, timer, sets, self.opts.fresh_sets, 701)
        if found is None:
            return
        med, med_seen, n = found
        t["fresh_ms"], t["seen_ms"] = med, med_seen
        if med > 1.5 * med_seen + 0.02:
            # NOTE: a few pairs on a ~0.1 ms problem can differ by chance (one H100 run: 0.309 against 0.190
            # ms, 3 pairs, an honest file): a second round of new inputs, at least 6 pairs, must agree.
            med2, seen2, n2 = self.fresh_vs_seen(problem, pair, timer, sets, max(6, 2 * n), 801)
            t["fresh_ms_again"], t["seen_ms_again"] = med2, seen2
            if med2 > 1.5 * seen2 + 0.02:
                self.caught([cheat("input_cache", f"a call on never-seen inputs takes {med:.3f} ms but on "
                                                  f"already-seen inputs {med_seen:.3f} ms (medians of {n} "
                                                  f"interleaved pairs; {med2:.3f} against {seen2:.3f} ms in "
                                                  f"{n2} more): results are cached by input value")], "timing")
            else:
                self.r["details"].append(f"never-seen inputs: {med:.3f} against {med_seen:.3f} ms in {n} pairs, "
                                         f"not confirmed by {n2} more ({med2:.3f} against {seen2:.3f} ms)")

    def fresh_vs_seen(self, problem, pair, timer, sets, n: int, seed0: int):
        """(median ms on never-seen inputs, median ms on already-seen ones, pairs), or None for n = 0;
        each never-seen output is checked against the reference too."""
        fresh_sets = []
        for j in range(n):
            torch.manual_seed(self.opts.seed * 1000 + seed0 + j)
            fresh_sets.append(to_cuda(problem.inputs()))
        fresh, seen = [], []
        for j, inputs in enumerate(fresh_sets):
            expected = pair.ref(*inputs)
            seen_ms, ms, out = timer.pair(pair.cand, sets[j % len(sets)], inputs, fresh_first=j % 2 == 1)
            seen.append(seen_ms)
            fresh.append(ms)
            v = compare(out, expected, mode="kernelbench")
            if v["rel"] is None or v["rel"] > 2e-2 or "NaN" in v["why"]:
                self.caught([cheat("input_cache", f"wrong on never-seen timing inputs (rel error {v['rel']})")],
                            "timing")
        if not fresh:
            return None
        return statistics.median(fresh), statistics.median(seen), len(fresh)

    def summary(self) -> str:
        n, g, t = len(self.r["correctness"]), len(self.r["generalization"]), self.r["timing"]
        msg = f"correct on {n} trials and {g} generalisation variants"
        if t:
            msg += f"; {t['candidate_ms']:.3f} ms vs eager {t['eager_ms']:.3f} ms ({t['speedup_vs_eager']:.2f}x)"
            if t.get("speedup_vs_compile"):
                msg += f", vs torch.compile {t['compile_ms']:.3f} ms ({t['speedup_vs_compile']:.2f}x)"
        return msg


def mode_variant(model) -> bool | None:
    """True: judge the model in eval mode too; False: in training mode too; None: its mode changes
    nothing judgeable (no norm with running statistics, or a dropout that would make training random)."""
    norms = [m for m in model.modules() if getattr(m, "track_running_stats", False)
             and isinstance(getattr(m, "running_mean", None), torch.Tensor)]
    if not norms:
        return None
    if all(m.training for m in norms):
        return True
    dropout = any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())
    return None if dropout else False


def compare_buffers(ref, cand, when: str) -> dict | None:
    """One verdict over every buffer the two models share by name (None when the original has none)."""
    ref_b, cand_b = dict(ref.named_buffers()), dict(cand.named_buffers())
    if not ref_b:
        return None
    missing = sorted(set(ref_b) - set(cand_b))
    if missing:
        return {"inputs": when, "ok": True, "why": f"the candidate has no buffer {missing[0]}: not compared",
                "compared": 0}
    worst = None
    for name, r in ref_b.items():
        v = compare(cand_b[name], r, None, "table", 4.0, name)
        if not v["ok"]:
            return {"inputs": when, "ok": False, "why": f"{name}: {v['why']}", "compared": len(ref_b),
                    "max_abs": v["max_abs"], "rel": v["rel"]}
        if v["rel"] is not None and (worst is None or v["rel"] > worst[1]):
            worst = (name, v["rel"])
    why = f"{len(ref_b)} buffers match" + (f" (worst {worst[0]}, rel {worst[1]:.2e})" if worst else "")
    return {"inputs": when, "ok": True, "why": why, "compared": len(ref_b)}


def _line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:300]


def _failed(label: str, why: str) -> dict:
    return {"inputs": label, "ok": False, "max_abs": None, "rel": None, "first_bad": [], "n_bad": 0, "why": why,
            "oracle": None}


def _cuda_alive():
    """Re-raise when the CUDA context is broken (illegal address, device assert): nothing after it is sound."""
    torch.cuda.synchronize()


def judge(argv: list[str]) -> dict:
    """Judge as the arguments say, saving the result file; returns the result."""
    problem_path, source_path, opts_arg, result_path = argv
    opts = CheckOptions.from_json(Path(opts_arg).read_text() if os.path.isfile(opts_arg) else opts_arg)
    registered = quiet.register(opts.judges_dir)  # where the bench runs judges side by side: pausable
    w = Worker(problem_path, source_path, opts, result_path)
    try:
        w.run()
    except Stop:
        pass
    except ProblemError as e:
        w.r.update(fatal="problem", message=str(e))
        w.save()
    except Exception as e:  # noqa: BLE001 - CUDA errors and candidate crashes become a runtime_error result
        w.r["outcome"] = "runtime_error"
        w.r["message"] = f"during {w.r['stage']}: {type(e).__name__}: {_line(e)}"
        w.save()
    finally:
        quiet.unregister(registered)
    return w.r


def main(argv: list[str]) -> int:
    judge(argv)
    sys.stdout.flush()
    # NOTE: skip interpreter teardown: a candidate's threads or a broken CUDA context can hang or crash it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
