"""Runtime anti-cheat probes (clocks, threads, processes, precision flags, freed-memory poison, kernels run),
and the one switch that sets the fp32 precision the judge and the first check run under."""
from __future__ import annotations

import importlib
import os
import threading
import time
from contextlib import contextmanager

import torch

# What a candidate could patch to fake its timing; the judge captures each before importing it.
CLOCK_PATHS = (
    "time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "torch.cuda.synchronize", "torch.cuda.Event",
    "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize",
    "torch.cuda.Event.query", "torch.cuda.current_stream", "torch.cuda.Stream", "torch.cuda.Stream.synchronize",
    "torch._C._cuda_synchronize", "torch._C._CudaEventBase.record", "torch._C._CudaEventBase.elapsed_time",
    "torch._C._CudaEventBase.synchronize", "torch.cuda.streams.Event",
)
POISON_BYTE = 0xFF  # all-ones bits: NaN in every float dtype, -1 in the signed ints


def _resolve(path: str):
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for p in parts[1:]:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj


class RealClocks:
    """The real timing functions, captured before any candidate code runs; the judge times with these."""

    def __init__(self):
        self.originals = {p: _resolve(p) for p in CLOCK_PATHS}
        self.perf_counter = time.perf_counter
        self.synchronize = torch.cuda.synchronize
        self.Event = torch.cuda.Event
        self.record = torch.cuda.Event.record
        self.elapsed_time = torch.cuda.Event.elapsed_time

    def changed(self) -> list[str]:
        """Paths whose current object is no longer the captured one."""
        return [p for p, o in self.originals.items() if o is not None and _resolve(p) is not o]

    def event(self):
        return self.Event(enable_timing=True)


def precision_flags() -> dict[str, str]:
    """Every flag that changes fp32 numerics; reading a legacy flag may raise after mixed API use."""
    getters = {
        "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "fp32_precision": lambda: torch.backends.fp32_precision,
        "cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
        "cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
    }
    out = {}
    for k, g in getters.items():
        try:
            out[k] = str(g())
        except Exception as e:  # noqa: BLE001 - absent on this torch, or mixed legacy/new API
            out[k] = f"<{type(e).__name__}>"
    return out


def set_fp32(allow_tf32: bool) -> tuple[bool, bool, str]:
    """Strict fp32 (TF32 off for cuBLAS and cuDNN, float32_matmul_precision "highest"), or TF32
    allowed for both ("high"); returns the settings it replaced, for `restore_fp32`."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")
    return saved


def restore_fp32(saved: tuple[bool, bool, str]) -> None:
    """Put back what `set_fp32` replaced."""
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


def precision_line(allow_tf32: bool) -> str:
    """How fp32 runs under `set_fp32(allow_tf32)`, for reports."""
    return "fp32 with TF32 allowed" if allow_tf32 else "strict fp32 (TF32 off for cuBLAS and cuDNN)"


@contextmanager
def fp32_mode(allow_tf32: bool):
    """`set_fp32(allow_tf32)` for the block, the previous settings restored after; yields the precision line.

    The one strict-fp32 switch: the judge's child process and the first check both run under it.
    NOTE: a rewrite may change which fp32 values a conv multiplies (the reduce rewrites pool first or
    sum filters); under TF32 each side rounds its own operands to 10 bits and the two differ by more
    than the fp32 tolerance, while both are right in strict fp32.
    """
    saved = set_fp32(allow_tf32)
    try:
        yield precision_line(allow_tf32)
    finally:
        restore_fp32(saved)


def thread_count() -> int:
    return threading.active_count()


def child_pids() -> set[int]:
    """Live (non-zombie) child processes of this process, read from /proc."""
    me, kids = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return kids
    for d in entries:
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(rest[1]) == me and rest[0] != "Z":
            kids.add(int(d))
    return kids


def poison_free_memory(plant: torch.Tensor | None = None) -> int:
    """Fill every free block of the CUDA caching allocator: all-ones bytes, or the bytes of `plant`.

    `torch.cuda.empty_cache()` would hand blocks back to the driver, whose next cudaMalloc may return the
    same stale bytes; grabbing the cached free blocks and writing them makes any read of freed memory visible.
    """
    torch.cuda.synchronize()
    sizes = sorted((b["size"] for seg in torch.cuda.memory_snapshot() for b in seg["blocks"]
                    if b["state"] == "inactive"), reverse=True)
    src = plant.detach().contiguous().reshape(-1).view(torch.uint8) if plant is not None else None
    grabbed, total = [], 0
    for size in sizes:
        try:
            grabbed.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError:
            break
    for t in grabbed:
        t.fill_(POISON_BYTE)
        if src is not None:
            n = min(t.numel(), src.numel())
            t[:n].copy_(src[:n])
        total += t.numel()
    torch.cuda.synchronize()
    del grabbed
    return total


def poison_fraction(t: torch.Tensor) -> float:
    """Fraction of `t`'s elements whose bytes are all the poison pattern (memory nothing wrote)."""
    if t.numel() == 0 or not t.is_cuda:
        return 0.0
    b = t.detach().contiguous().view(torch.uint8).reshape(t.numel(), -1)
    return float((b == POISON_BYTE).all(dim=1).float().mean())


def cuda_kernel_times(fn) -> list[tuple[str, float]] | None:
    """(name, GPU microseconds) of each kernel `fn()` launches, by the profiler; None when it sees no GPU."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - no CUPTI here: the check is skipped, not failed
        return None
    out = []
    for e in prof.events():
        dev = getattr(e, "device_type", None)
        if dev is not None and "CUDA" in str(dev) and not e.name.startswith(("Memcpy", "Memset")):
            out.append((e.name, float(e.time_range.elapsed_us())))
    return out


def cheat(check: str, evidence: str) -> dict:
    return {"check": check, "caught": True, "evidence": evidence}


@contextmanager
def module_calls():
    """Collect the class of every nn.Module called while the block runs (global forward pre-hook)."""
    called: list[type] = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, args: called.append(type(m)))
    try:
        yield called
    finally:
        handle.remove()
