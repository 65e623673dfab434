"""Time calls as a call is timed in use: warm-up, L2 flushed, CUDA events, interleaved, median.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.

The judge times the same way (judge/timing.py's Timer, which the first check `torchweld compile`
runs uses too): it flushes L2 with the buffer `flush_buffer` makes and takes `median` of its runs,
the two rules `_tw_time` spells out inline, because an emitted file cannot import them;
tests/test_judge_timing.py runs `_tw_time` on fake CUDA to hold the copies equal. The judge's timer
differs where a judge must: its clocks are captured before the candidate is imported, and it runs
until a minimum count and time rather than 7 times.
"""
import torch


def l2_bytes(device) -> int:
    """The device's L2 cache size in bytes (64 MiB where the device does not say)."""
    return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20


def flush_buffer(device) -> torch.Tensor:
    """What is zeroed before each timed call to flush L2: int32s filling twice its size."""
    return torch.empty(2 * l2_bytes(device) // 4, dtype=torch.int32, device=device)


def median(times) -> float:
    """The middle of the sorted times (the upper middle of an even count: always a measured time)."""
    return sorted(times)[len(times) // 2]


# pasted into files that choose between ways of running a step by timing them at its first
# call: a convolution's layout (CONV_RUNTIME), a cuBLASLt epilogue (LT_RUNTIME).
# --- pasted from here ---
def _tw_time(calls, device):
    """Median ms of each call in `calls` (functions of no argument), timed as a call is timed in
    use: one warm-up call each, then the L2 cache flushed before each, CUDA events around one call,
    the calls interleaved, the median of 7."""
    for call in calls:
        call()
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
    times = [[] for _ in calls]
    for _ in range(7):
        for i, call in enumerate(calls):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end))
    return [sorted(t)[len(t) // 2] for t in times]
