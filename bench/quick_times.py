"""Quick timings where a full judge run does not fit the device time: compile, build, check on 3
fresh inputs, and time eager, torch.compile and ModelNew with the judge's strict fp32 and its
method's essentials (CUDA events, L2 flushed, rotating inputs, median). One JSON line per problem.

    python3 bench/quick_times.py problems OUT_DIR [--skip RESULTS_DIR] [--prewarm N]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchweld.bench.tasks import find_problems, load_results, plan_tasks  # noqa: E402
from torchweld.bench.prewarm import load_prewarm, prewarm  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--skip", type=Path, help="a bench results dir: problems judged there are skipped")
    ap.add_argument("--prewarm", type=int, default=16)
    args = ap.parse_args()
    import torch

    from torchweld.judge.first import first_check
    from torchweld.judge.guards import set_fp32
    from torchweld.problem import load_problem

    out = args.out.resolve()
    done = {r.get("key") for r in load_results(args.skip)} if args.skip else set()
    tasks = plan_tasks(args.problems, find_problems(args.problems, exclude=(out,)), None, out / "candidates")
    tasks = [t for t in tasks if t.key not in done]
    prewarm(tasks, out, args.prewarm, None)
    cold = load_prewarm(out)
    set_fp32(False)
    out.mkdir(parents=True, exist_ok=True)
    lines = out / "times.jsonl"
    seen = {json.loads(x)["key"] for x in lines.read_text().splitlines()} if lines.exists() else set()
    for t in tasks:
        if t.key in seen:
            continue
        row = {"key": t.key, "category": t.category, "name": t.stem, "prewarm": cold.get(t.key, {})}
        start = time.perf_counter()
        try:
            if not t.candidate.is_file():
                from torchweld.pipeline import compile_file

                compile_file(t.problem, t.candidate)
            report = first_check(load_problem(t.problem), t.candidate, trials=3)
            row.update(ok=report.ok, max_abs=report.max_abs, rel=report.rel, times_ms=report.times_ms,
                       build_s=round(report.build_s, 3), errors=report.errors)
        except Exception as e:  # recorded, the run goes on
            row.update(ok=False, errors=[f"{type(e).__name__}: {e}"[:300]])
        row["wall_s"] = round(time.perf_counter() - start, 1)
        torch.cuda.empty_cache()
        with lines.open("a") as f:
            f.write(json.dumps(row) + "\n")
        ms = row.get("times_ms", {})
        print(f"{t.key}: ok={row['ok']} " + " ".join(f"{k}={v:.3f}" for k, v in ms.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
