"""Where a forward's time goes: eager and torch.compile-free ModelNew under torch.profiler (CUDA
kernels with their device times, and the host time per call). For looking, not for the table.

    python3 bench/profile_probe.py OUT.txt PROBLEM.py [PROBLEM.py ...]
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from torchweld.judge.timing import medians
    from torchweld.judge.correctness import to_cuda
    from torchweld.judge.guards import set_fp32
    from torchweld.pipeline import compile_problem
    from torchweld.problem import load_module, load_problem

    set_fp32(False)
    tmp = Path(tempfile.mkdtemp())
    lines = []
    for f in map(Path, argv[1:]):
        problem = load_problem(f)
        path = tmp / f"{f.stem}_new.py"
        path.write_text(compile_problem(problem).source)
        module = load_module(path, path.read_text(), prefix="tw_prof")
        ref = problem.build_model(0).cuda()
        new = module.ModelNew(*problem.init_inputs()).cuda()
        new.load_state_dict(ref.state_dict())
        x = to_cuda(problem.inputs())
        lines.append(f"=== {f.parent.name}/{f.stem}")
        with torch.no_grad():
            for label, m in (("eager", ref), ("ModelNew", new)):
                for _ in range(5):
                    m(*x)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    m(*x)
                host_us = (time.perf_counter() - t0) / 200 * 1e6
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        m(*x)
                    torch.cuda.synchronize()
                kernels = [(e.key, e.device_time_total / 10 if hasattr(e, "device_time_total") else e.cuda_time_total / 10)
                           for e in prof.key_averages()]
                kernels = [k for k in kernels if k[1] > 0]
                lines.append(f"  {label}: event median {medians({'fn': m}, [x], 100)['fn'] * 1e3:.1f} us, host {host_us:.1f} us/call "
                             f"(async), device {sum(t for _, t in kernels):.1f} us in {len(kernels)} kernels:")
                lines += [f"      {t:8.1f} us  {k[:110]}" for k, t in sorted(kernels, key=lambda k: -k[1])[:6]]
            # NOTE: interleaved rounds: an order effect (clocks, heat) shows up as a drift between rounds.
            rounds = {"eager": [], "ModelNew": []}
            for _ in range(4):
                for label, m in (("eager", ref), ("ModelNew", new)):
                    rounds[label].append(round(medians({"fn": m}, [x], 60)["fn"] * 1e3, 1))
            lines.append(f"  interleaved event medians (us): eager {rounds['eager']}, ModelNew {rounds['ModelNew']}")
        Path(argv[0]).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
