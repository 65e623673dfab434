"""Bandwidth of torchweld's reduction, softmax and norm kernels on inputs of 256 MB and more.

Each problem is compiled with torchweld, built, checked against eager, and timed with CUDA events
(L2 flushed before each call, median of RUNS). The figure of merit is achieved GB/s over the
minimum bytes moved (input read once, output and parameters written/read once), against the
device's measured copy bandwidth (a large device-to-device `copy_`, which reads and writes).

    python3 bench/bandwidth.py OUT.md    # on a GPU; about a minute on an H100
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchweld.pipeline import compile_problem  # noqa: E402
from torchweld.problem import load_module, load_problem  # noqa: E402

RUNS = 25
SOURCE = '''"""{name}"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
'''
# name: (input shape, forward expression, constructor line); every input is 256 MiB of fp32
PROBLEMS = {
    "sum over rows (16384 x 4096, dim -1)": ("16384, 4096", "x.sum(dim=-1)", "pass"),
    "sum over a middle dim (64 x 1024 x 1024, dim 1)": ("64, 1024, 1024", "x.sum(dim=1)", "pass"),
    "softmax over rows (16384 x 4096)": ("16384, 4096", "torch.softmax(x, dim=-1)", "pass"),
    "logsumexp over rows (16384 x 4096)": ("16384, 4096", "torch.logsumexp(x, dim=-1)", "pass"),
    "layer norm (16384 x 4096, affine)": ("16384, 4096", "self.norm(x)", "self.norm = nn.LayerNorm(4096)"),
    "group norm (128 x 512 x 32 x 32, 32 groups)": ("128, 512, 32, 32", "self.norm(x)", "self.norm = nn.GroupNorm(32, 512)"),
    "batch norm, training (64 x 256 x 64 x 64)": ("64, 256, 64, 64", "self.norm(x)", "self.norm = nn.BatchNorm2d(256)"),
}
# NOTE: training batch norm reads its input twice (the statistics of a channel span the whole batch:
# 1 MiB a channel here, 256 MiB in all, more than the chip holds), so its floor is 3 passes, not 2.
READS = {"batch norm, training (64 x 256 x 64 x 64)": 2}


def timed(fn, flush: torch.Tensor) -> float:
    """Median ms of fn() over RUNS calls, the L2 flushed before each."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(RUNS):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(flush: torch.Tensor) -> float:
    """GB/s of a 1 GiB device-to-device copy (read + write counted)."""
    a = torch.empty(2**28, device="cuda")
    b = torch.empty_like(a)
    ms = timed(lambda: b.copy_(a), flush)
    return 2 * a.numel() * 4 / ms / 1e6


def tensor_bytes(t) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    return sum(tensor_bytes(x) for x in t)


def main(out: Path) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    flush = torch.empty(2**26, device="cuda")  # 256 MiB: more than any L2
    copy = copy_bandwidth(flush)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="tw_bandwidth_"))
    for i, (name, (shape, expr, init)) in enumerate(PROBLEMS.items()):
        reads = READS.get(name, 1)
        path = work / f"p{i}.py"
        path.write_text(SOURCE.format(name=name, shape=shape, expr=expr, init=init))
        problem = load_problem(path)
        new_path = work / f"p{i}_new.py"
        new_path.write_text(compile_problem(problem).source)
        module = load_module(new_path, new_path.read_text(), prefix="tw_bw")
        torch.manual_seed(0)
        ref = problem.build_model(seed=0).cuda()
        new = module.ModelNew().cuda()
        new.load_state_dict(ref.state_dict())
        x = problem.inputs()[0].cuda()
        with torch.no_grad():
            want, got = ref(x.clone()), new(x.clone())
            ok = torch.allclose(got, want, atol=1e-4, rtol=1e-4)
            params = sum(tensor_bytes(p) for p in new.parameters())
            moved = tensor_bytes(x) + tensor_bytes(got) + params
            ms = timed(lambda: new(x), flush)
            eager = timed(lambda: ref(x), flush)
        gbs = moved / ms / 1e6
        actual = (moved + (reads - 1) * tensor_bytes(x)) / ms / 1e6  # what the kernel reads and writes
        rows.append(f"| {name} | {moved / 2**20:,.0f} MiB | {ms:.3f} | {gbs:,.0f} | {100 * gbs / copy:.0f}% | "
                    f"{reads} | {100 * actual / copy:.0f}% | {eager:.3f} | {'yes' if ok else 'NO'} |")
        print(rows[-1], flush=True)
    device = torch.cuda.get_device_name()
    lines = [f"Device: {device}, PyTorch {torch.__version__}. Copy bandwidth (1 GiB `copy_`, read + write): "
             f"**{copy:,.0f} GB/s**. Times: CUDA events, L2 flushed, median of {RUNS}.", "",
             "| problem | bytes moved (min) | torchweld ms | GB/s | % of copy | input reads | % of copy, bytes read and written "
             "| eager ms | matches eager |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|", *rows, ""]
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 bench/bandwidth.py OUT.md")
    if not torch.cuda.is_available():
        sys.exit("bandwidth.py needs a CUDA GPU")
    main(Path(sys.argv[1]))
