"""The timing stage, and the one timer: CUDA events around each call, L2 flushed before each, rotating
inputs, median of many runs. The candidate's calls are timed in its own process (candidate_process.py) by the same
events, started by this side; this side flushes the L2 and synchronises before each, keeps its own wall
time of each request, and checks the candidate's figure against it (`Remote.timed_check`).

The judge times with `Timer`, and so does the first check `torchweld compile` runs (`medians`). Its L2
flush and its median are runtime/site_timing.py's, the rules the emitted files' `_tw_time` follows. The
stage (`stage`) times eager, torch.compile and the candidate interleaved, then checks what only timing
shows: results cached by input value, work left running on another stream.
"""
from __future__ import annotations

import random

import torch

from torchweld.judge import quiet
from torchweld.judge.correctness import sync, to_dev
from torchweld.judge.guards import cheat
from torchweld.judge.guards import RealClocks
from torchweld.judge.tolerance import compare
from torchweld.runtime.site_timing import flush_buffer, l2_bytes, median

METHOD = ("CUDA events (captured before the candidate was imported) around each call on the current stream; "
          "L2 flushed before each call by writing a buffer of 2x the L2 size; {warmup} warm-up calls; "
          "{sets} rotating input sets; synchronize after each call; eager, torch.compile and the candidate "
          "interleaved call by call; median of >= {runs} runs and >= {secs:g} s each")


class Timed:
    """One function's times from an interleaved run: the median, every run in order, the last outputs."""

    def __init__(self, median: float, times: list[float], last: list):
        self.median, self.times, self.last = median, times, last

    def half_median(self) -> float:
        """The median of the second half of the runs (against the whole: drift within the run)."""
        return median(self.times[len(self.times) // 2:])


class Timer:
    """Times callables the same way for eager, torch.compile and the candidate."""

    def __init__(self, clocks: RealClocks, min_runs: int, min_s: float, max_runs: int, warmup: int = 3,
                 device=None, cpu: bool = False):
        self.clocks, self.min_runs, self.min_s, self.max_runs, self.warmup = clocks, min_runs, min_s, max_runs, warmup
        self.cpu = cpu  # tests: the whole protocol on CPU tensors, timed by the host clock, no flush
        if not cpu:
            device = torch.cuda.current_device() if device is None else device
        self.l2_bytes = 0 if cpu else l2_bytes(device)
        self.flush_buf = None if cpu else flush_buffer(device)
        self.samples: list = []  # (input set, output) of candidate calls picked at random, checked after the run
        pick = random.SystemRandom()
        # NOTE: four of the first min_runs candidate calls, then one in eight: never none, never foreseeable.
        self._due = set(pick.sample(range(max(min_runs, 4)), 4))
        self._pick, self._calls = pick, 0

    def flush(self):
        if self.flush_buf is not None:
            self.flush_buf.zero_()

    def sync(self):
        if not self.cpu:
            self.clocks.synchronize()

    def one(self, fn, args) -> tuple[float, object]:
        """A single timed call after an L2 flush: (ms, output). The candidate's (a RemoteModel) is timed in its
        process, after this side's flush and synchronize, this side's wall time kept beside it."""
        c = self.clocks
        self.flush()
        if hasattr(fn, "timed"):
            self.sync()
            return fn.timed(args)
        if self.cpu:
            t0 = c.perf_counter()
            out = fn(*args)
            return (c.perf_counter() - t0) * 1e3, out
        s, e = c.event(), c.event()
        c.record(s)
        out = fn(*args)
        c.record(e)
        c.synchronize()
        return c.elapsed_time(s, e), out

    def pair(self, fn, seen, fresh, fresh_first: bool) -> tuple[float, float, object]:
        """One call on already-seen inputs and one on never-seen ones, each from an idle GPU: (seen ms,
        fresh ms, the fresh call's output). Work still queued before a call lets the host run ahead,
        which hides that call's launch overhead: timed right after an unsynchronised reference call, a
        launch-bound file looked faster on the seen inputs than on the fresh ones, by its launch time."""
        self.sync()
        if fresh_first:
            fresh_ms, out = self.one(fn, fresh)
            seen_ms, _ = self.one(fn, seen)
        else:
            seen_ms, _ = self.one(fn, seen)
            fresh_ms, out = self.one(fn, fresh)
        return seen_ms, fresh_ms, out

    def interleaved(self, fns: dict, sets: dict[str, list] | list) -> dict[str, "Timed"]:
        """Each function timed call by call in turn (the turn's first function rotating), so a drift
        of the GPU's clocks or of the host during the run weighs on all of them alike; until each has
        >= min_runs runs and the run took >= min_s per function (at most max_runs each). `sets`: each
        function's own copies of the rotating input sets (or one list for all). Some of the candidate's outputs,
        picked at random, are kept for `samples` (checked after the run, not inside it)."""
        c = self.clocks
        if not isinstance(sets, dict):
            sets = {k: sets for k in fns}
        for label, fn in fns.items():
            for i in range(self.warmup):
                fn(*sets[label][i % len(sets[label])])
        self.sync()
        order = list(fns)
        n = len(next(iter(sets.values())))
        times = {k: [] for k in fns}
        last = {k: [None] * n for k in fns}
        t0, i = c.perf_counter(), 0
        while i < self.max_runs and (i < self.min_runs or c.perf_counter() - t0 < self.min_s * len(fns)):
            k = i % n
            for label in order[i % len(order):] + order[:i % len(order)]:
                ms, out = self.one(fns[label], sets[label][k])
                last[label][k] = out
                times[label].append(ms)
                if hasattr(fns[label], "timed"):
                    if self._calls in self._due or (len(self.samples) < 16 and self._pick.random() < 0.125):
                        self.samples.append((k, out))
                    self._calls += 1
            i += 1
        return {k: Timed(median(v), v, last[k]) for k, v in times.items()}

    def method(self, sets: int) -> str:
        return METHOD.format(warmup=self.warmup, sets=sets, runs=self.min_runs, secs=self.min_s) + (
            f"; L2 {self.l2_bytes / 2**20:.0f} MiB")


def medians(fns: dict, sets: list, runs: int = 30, clocks: RealClocks | None = None, device=None) -> dict[str, float]:
    """Median ms of each function over exactly `runs` interleaved runs after one warm-up call per input
    set: the first check's timing (it has no candidate to guard against, so the clocks are taken now)."""
    timer = Timer(clocks or RealClocks(), runs, 0.0, runs, warmup=len(sets), device=device)
    return {k: t.median for k, t in timer.interleaved(fns, sets).items()}


def compile_model(model, mode: str, sample: list, clocks: RealClocks):
    """(compiled model, compile seconds, error line or None); the first call, which compiles, is timed."""
    t0 = clocks.perf_counter()
    try:
        compiled = torch.compile(model, mode=mode)
        with torch.no_grad():
            compiled(*sample)
        clocks.synchronize()
    except Exception as e:  # noqa: BLE001 - a compile failure is recorded, timing carries on
        text = str(e).strip()
        return None, clocks.perf_counter() - t0, f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]
    return compiled, clocks.perf_counter() - t0, None


# ---- the stage ---------------------------------------------------------------------------------------

def compile_reference(j, problem, init_args):
    """torch.compile of a copy of the original (seeded as the judged one is), before any timing, so that
    all three can be timed interleaved: (compiled or None, seconds, error). `j` is the trusted Judging; it
    runs while the candidate's process imports the candidate; on the CPU (tests) nothing is compiled."""
    if j.opts.device == "cpu":
        return None, 0.0, "not compiled on the CPU"
    torch.manual_seed(j.opts.seed)
    ref = problem.model_cls(*init_args).to(j.opts.device)
    torch.manual_seed(j.opts.seed * 1000 + 501)
    sample = to_dev(problem.inputs(), j.opts.device)
    saved = {k: b.clone() for k, b in ref.named_buffers()}
    result = compile_model(ref, j.opts.compile_mode, sample, guards_clocks())
    with torch.no_grad():
        for k, b in ref.named_buffers():
            b.copy_(saved[k])
    return result


def guards_clocks() -> RealClocks:
    """This side's clocks: no candidate code ever runs in this process, so they are the real ones."""
    return RealClocks()


def stage(j, problem, pair, compiled_ref):
    """Eager, torch.compile and the candidate timed interleaved (other judges of the bench paused
    meanwhile), then the checks only timing can make."""
    j.stage("timing")
    opts = j.opts
    if opts.anti_cheat:
        j.check_environment("before timing")
    timer = Timer(guards_clocks(), opts.timing_runs, opts.timing_min_s, opts.timing_max_runs,
                  cpu=pair.device == "cpu")
    cpu_sets = []
    for s in range(opts.timing_sets):
        torch.manual_seed(opts.seed * 1000 + 501 + s)
        cpu_sets.append(problem.inputs())
    ref_sets = [to_dev(x, pair.device) for x in cpu_sets]
    cand_sets = [pair.remote.share(x) for x in cpu_sets]
    compiled, secs, err = compiled_ref
    if compiled is None and pair.device != "cpu":
        j.r["details"].append(f"torch.compile({opts.compile_mode}) failed: {err}")
    fns, sets = {"eager": pair.ref, "candidate": pair.cand}, {"eager": ref_sets, "candidate": cand_sets}
    if compiled is not None:
        fns["compile"], sets["compile"] = compiled, ref_sets
    pair.remote.walls.clear()
    # NOTE: other judges of the bench paused meanwhile: the host's speed is part of a launch-bound time.
    with quiet.quiet(opts.judges_dir) as paused:
        timed = timer.interleaved(fns, sets)
        eager, cand = timed["eager"], timed["candidate"]
        cand_ms = cand.median
        t = {"eager_ms": eager.median, "compile_ms": None, "candidate_ms": cand_ms, "compile_build_s": secs,
             "speedup_vs_eager": eager.median / cand_ms if cand_ms else None, "speedup_vs_compile": None,
             "candidate_ms_repeat": cand.half_median(), "method": timer.method(len(cand_sets)), "runs": len(cand.times)}
        if compiled is not None:
            t["compile_ms"] = timed["compile"].median
            t["speedup_vs_compile"] = t["compile_ms"] / cand_ms if cand_ms else None
        t["judges_paused"] = len(paused)
        j.r["timing"] = t
        ref_last, cand_last = eager.last, cand.last
        del timed, eager, cand
        if opts.anti_cheat:
            timing_checks(j, problem, pair, timer, (ref_sets, cand_sets), ref_last, cand_last, t)
            j.check_environment("after timing the candidate")
        del ref_last, cand_last


def _wrong(out, ref) -> str | None:
    """Why a timed output is off the reference's (kernelbench tolerance), or None."""
    verdict = compare(out, ref, mode="kernelbench")
    if verdict["rel"] is None or verdict["rel"] > 2e-2 or "NaN" in verdict["why"]:
        return f"rel error {verdict['rel']}"
    return None


def timing_checks(j, problem, pair, timer: Timer, sets, ref_last, cand_last, t: dict):
    """Timed outputs still right (some picked at random, and the last of each set); the candidate's times
    against this side's wall time; fresh inputs as fast as rotating ones."""
    for k, out in timer.samples:
        why = _wrong(out, ref_last[k])
        if why:
            j.caught([cheat("timed_output", f"a timed call on input set {k}, picked at random after the run, returned "
                                            f"a wrong output ({why}); it was right when checked: it behaves "
                                            "differently while it is timed")], "timing")
    timer.samples.clear()
    for k, (out, ref) in enumerate(zip(cand_last, ref_last)):
        why = _wrong(out, ref)
        if why:
            j.caught([cheat("input_cache", f"the output of the last timed call on input set {k} is wrong "
                                           f"({why}): a cached or stale result")], "timing")
    wall = pair.remote.timed_check()
    if wall is not None:
        t.update({k: wall[k] for k in ("wall_ms", "wall_q25_ms", "event_ms", "round_trip_ms")})
        if wall["forged"]:
            j.caught([cheat("timing_forged", f"the candidate's process says its calls take {wall['event_ms']:.3f} ms, "
                                             f"but this side's clock sees {wall['wall_q25_ms']:.3f} ms a request (lower "
                                             "quartile) once the round trip measured before its import is taken "
                                             "out: its times are "
                                             "forged, or its work runs after its end event (another stream)")],
                     "timing")
    # Never-seen inputs against already-seen ones, timed in pairs under the same conditions: each call
    # starts from an idle GPU, and which of the two goes first alternates.
    found = fresh_vs_seen(j, problem, pair, timer, sets[1], j.opts.fresh_sets, 701)
    if found is None:
        return
    med, med_seen, n = found
    t["fresh_ms"], t["seen_ms"] = med, med_seen
    if med > 1.5 * med_seen + 0.02:
        # NOTE: a few pairs on a short problem can differ by chance, on an honest file too: a second
        # round of new inputs, at least 6 pairs, must agree.
        med2, seen2, n2 = fresh_vs_seen(j, problem, pair, timer, sets[1], max(6, 2 * n), 801)
        t["fresh_ms_again"], t["seen_ms_again"] = med2, seen2
        if med2 > 1.5 * seen2 + 0.02:
            j.caught([cheat("input_cache", f"a call on never-seen inputs takes {med:.3f} ms but on "
                                           f"already-seen inputs {med_seen:.3f} ms (medians of {n} "
                                           f"interleaved pairs; {med2:.3f} against {seen2:.3f} ms in "
                                           f"{n2} more): results are cached by input value")], "timing")
        else:
            j.r["details"].append(f"never-seen inputs: {med:.3f} against {med_seen:.3f} ms in {n} pairs, "
                                  f"not confirmed by {n2} more ({med2:.3f} against {seen2:.3f} ms)")


def fresh_vs_seen(j, problem, pair, timer: Timer, cand_sets, n: int, seed0: int):
    """(median ms on never-seen inputs, median ms on already-seen ones, pairs), or None for n = 0;
    each never-seen output is checked against the reference too."""
    fresh, seen = [], []
    for k in range(n):
        torch.manual_seed(j.opts.seed * 1000 + seed0 + k)
        cpu = problem.inputs()
        expected = pair.ref(*to_dev(cpu, pair.device))
        sync(pair.device)
        seen_ms, ms, out = timer.pair(pair.cand, cand_sets[k % len(cand_sets)], pair.remote.share(cpu),
                                      fresh_first=k % 2 == 1)
        seen.append(seen_ms)
        fresh.append(ms)
        why = _wrong(out, expected)
        if why:
            j.caught([cheat("input_cache", f"wrong on never-seen timing inputs ({why})")], "timing")
    if not fresh:
        return None
    return median(fresh), median(seen), len(fresh)
