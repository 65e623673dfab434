"""Timing: CUDA events around each call, L2 flushed before each, rotating inputs, median of many runs.

The one timer: the judge times with it, and so does the first check `torchweld compile` runs (`medians`).
Its L2 flush and its median are runtime/timing.py's, the rules the emitted files' `_tw_time` follows.
"""
from __future__ import annotations

import torch

from torchweld.judge.guards import RealClocks
from torchweld.runtime.timing import flush_buffer, l2_bytes, median

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
                 device=None):
        self.clocks, self.min_runs, self.min_s, self.max_runs, self.warmup = clocks, min_runs, min_s, max_runs, warmup
        device = torch.cuda.current_device() if device is None else device
        self.l2_bytes = l2_bytes(device)
        self.flush_buf = flush_buffer(device)

    def flush(self):
        self.flush_buf.zero_()

    def one(self, fn, args) -> tuple[float, object]:
        """A single timed call after an L2 flush: (ms, output)."""
        c = self.clocks
        self.flush()
        s, e = c.event(), c.event()
        c.record(s)
        out = fn(*args)
        c.record(e)
        c.synchronize()
        return c.elapsed_time(s, e), out

    def pair(self, fn, seen, fresh, fresh_first: bool) -> tuple[float, float, object]:
        """One call on already-seen inputs and one on never-seen ones, each from an idle GPU: (seen ms,
        fresh ms, the fresh call's output). Work still queued before a call lets the host run ahead,
        which hides that call's launch overhead: a launch-bound file looked 4x faster on seen inputs,
        timed right after an unsynchronised reference call, than on fresh ones timed after it."""
        self.clocks.synchronize()
        if fresh_first:
            fresh_ms, out = self.one(fn, fresh)
            seen_ms, _ = self.one(fn, seen)
        else:
            seen_ms, _ = self.one(fn, seen)
            fresh_ms, out = self.one(fn, fresh)
        return seen_ms, fresh_ms, out

    def median(self, fn, sets: list) -> tuple[float, int, list]:
        """(median ms, runs, last output per input set) over rotating `sets`."""
        r = self.interleaved({"fn": fn}, sets)["fn"]
        return r.median, len(r.times), r.last

    def interleaved(self, fns: dict, sets: list) -> dict[str, "Timed"]:
        """Each function timed call by call in turn (the turn's first function rotating), so a drift
        of the GPU's clocks or of the host during the run weighs on all of them alike; until each has
        >= min_runs runs and the run took >= min_s per function (at most max_runs each)."""
        c = self.clocks
        for fn in fns.values():
            for i in range(self.warmup):
                fn(*sets[i % len(sets)])
        c.synchronize()
        order = list(fns)
        times = {k: [] for k in fns}
        last = {k: [None] * len(sets) for k in fns}
        t0, i = c.perf_counter(), 0
        while i < self.max_runs and (i < self.min_runs or c.perf_counter() - t0 < self.min_s * len(fns)):
            k = i % len(sets)
            for label in order[i % len(order):] + order[:i % len(order)]:
                ms, out = self.one(fns[label], sets[k])
                last[label][k] = out
                times[label].append(ms)
            i += 1
        return {k: Timed(median(v), v, last[k]) for k, v in times.items()}

    def wall_and_events(self, fn, args, runs: int = 10) -> tuple[float, float]:
        """(median wall ms of call + device-wide synchronize, median CUDA-event ms of the call)."""
        c = self.clocks
        wall, ev = [], []
        for _ in range(runs):
            c.synchronize()
            t0 = c.perf_counter()
            fn(*args)
            c.synchronize()
            wall.append((c.perf_counter() - t0) * 1e3)
        for _ in range(runs):
            c.synchronize()
            s, e = c.event(), c.event()
            c.record(s)
            fn(*args)
            c.record(e)
            c.synchronize()
            ev.append(c.elapsed_time(s, e))
        return median(wall), median(ev)

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
        return None, clocks.perf_counter() - t0, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    return compiled, clocks.perf_counter() - t0, None
