"""Timing: CUDA events around each call, L2 flushed before each, rotating inputs, median of many runs."""
from __future__ import annotations

import statistics

import torch

from torchweld.judge.guards import RealClocks

METHOD = ("CUDA events (captured before the candidate was imported) around each call on the current stream; "
          "L2 flushed before each call by writing a buffer of 2x the L2 size; {warmup} warm-up calls; "
          "{sets} rotating input sets; synchronize after each call; median of >= {runs} runs and >= {secs:g} s")


class Timer:
    """Times callables the same way for eager, torch.compile and the candidate."""

    def __init__(self, clocks: RealClocks, min_runs: int, min_s: float, max_runs: int, warmup: int = 3):
        self.clocks, self.min_runs, self.min_s, self.max_runs, self.warmup = clocks, min_runs, min_s, max_runs, warmup
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 50 * 1024 * 1024
        self.l2_bytes = l2
        self.flush_buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")

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

    def median(self, fn, sets: list) -> tuple[float, int, list]:
        """(median ms, runs, last output per input set) over rotating `sets`."""
        c = self.clocks
        for i in range(self.warmup):
            fn(*sets[i % len(sets)])
        c.synchronize()
        times, last, t0, i = [], [None] * len(sets), c.perf_counter(), 0
        while i < self.max_runs and (i < self.min_runs or c.perf_counter() - t0 < self.min_s):
            k = i % len(sets)
            ms, out = self.one(fn, sets[k])
            last[k] = out
            times.append(ms)
            i += 1
        return statistics.median(times), len(times), last

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
        return statistics.median(wall), statistics.median(ev)

    def method(self, sets: int) -> str:
        return METHOD.format(warmup=self.warmup, sets=sets, runs=self.min_runs, secs=self.min_s) + (
            f"; L2 {self.l2_bytes / 2**20:.0f} MiB")


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
