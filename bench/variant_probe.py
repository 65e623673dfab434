"""Time hand-made variants of a ModelNew file against eager (and torch.compile) the judge's way:
correctness on 3 fresh inputs, then Timer.interleaved (CUDA events, L2 flushed, rotating inputs),
and each variant's CUDA kernels under torch.profiler. For looking, not for the table.

    python3 bench/variant_probe.py OUT.json PROBLEM.py VARIANT.py [VARIANT.py ...] [--min-s S] [--compile]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def kernels(m, x, reps=10):
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            m(*x)
        torch.cuda.synchronize()
    ks = [(e.key, getattr(e, "device_time_total", 0) / reps) for e in prof.key_averages()]
    return [(k[:90], round(t, 2)) for k, t in sorted(ks, key=lambda k: -k[1]) if t > 0][:6]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("problem", type=Path)
    ap.add_argument("variants", type=Path, nargs="+")
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    import torch

    from torchweld.judge.correctness import to_cuda
    from torchweld.judge.guards import RealClocks, set_fp32
    from torchweld.judge.timing import Timer
    from torchweld.problem import load_module, load_problem

    set_fp32(False)
    problem = load_problem(args.problem)
    ref = problem.build_model(0).cuda()
    fns, row = {"eager": ref}, {"problem": str(args.problem), "variants": {}}
    sets = [to_cuda(problem.inputs()) for _ in range(3)]
    with torch.no_grad():
        for v in args.variants:
            mod = load_module(v, v.read_text(), prefix="tw_probe")
            new = mod.ModelNew(*problem.init_inputs()).cuda()
            new.load_state_dict(ref.state_dict())
            errs = []
            for x in sets:
                a, b = ref(*x), new(*x)
                errs.append(float((a.float() - b.float()).abs().max()))
            fns[v.stem] = new
            row["variants"][v.stem] = {"max_abs": max(errs)}
        if args.compile:
            fns["compile"] = torch.compile(ref)
            fns["compile"](*sets[0])
        timer = Timer(RealClocks(), min_runs=50, min_s=args.min_s, max_runs=5000)
        res = timer.interleaved(fns, sets)
        for k, t in res.items():
            row.setdefault("ms", {})[k] = round(t.median, 5)
        for k, m in fns.items():
            row.setdefault("kernels", {})[k] = kernels(m, sets[0])
            row.setdefault("plans", {})[k] = repr(getattr(m, "_tw_lt_plans", None))
    e = row["ms"]["eager"]
    print(args.problem.stem, " ".join(f"{k}={v:.4f}({e / v:.3f}x)" for k, v in row["ms"].items()), flush=True)
    with args.out.open("a") as f:
        f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
