"""What the kernel benchmarks (bench/gemm.py, bench/conv.py) share: nvcc for each site's source into a shared
library of its own, and the timer."""
from __future__ import annotations

import concurrent.futures
import shutil
import statistics
import subprocess
from pathlib import Path


def build_each(sources: dict[str, str], out: Path, flags: list[str], jobs: int) -> dict[str, Path]:
    """{id: library} for {id: CUDA source}, nvcc'd in parallel; a failed build prints its errors and exits.
    A library already in `out` from the same source and flags is kept (a `--dry-run` builds for a later run)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc not found")

    def one(item: tuple[str, str]):
        name, source = item
        cu, so = out / f"{name}.cu", out / f"{name}.so"
        text = f"// nvcc {' '.join(flags)}\n{source}"
        if so.is_file() and cu.is_file() and cu.read_text() == text and so.stat().st_mtime >= cu.stat().st_mtime:
            return name, so
        cu.write_text(text)
        proc = subprocess.run([nvcc, *flags, str(cu), "-o", str(so)], capture_output=True, text=True)
        return name, so if proc.returncode == 0 else proc.stderr[-3000:]

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = dict(pool.map(one, sources.items()))
    bad = {k: v for k, v in results.items() if not isinstance(v, Path)}
    for k, v in bad.items():
        print(f"BUILD FAILED {k}:\n{v}")
    if bad:
        raise SystemExit(1)
    return results


def median_ms(fn, flush, reps: int) -> float:
    """Median of `reps` calls, each after an L2 flush (`flush`, a tensor over twice the L2, zeroed), timed by CUDA
    events (2 warm-up calls)."""
    import torch

    fn(), fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)
