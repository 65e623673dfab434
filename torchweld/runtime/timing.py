"""Time calls as a call is timed in use: warm-up, L2 flushed, CUDA events, interleaved, median.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import torch

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
