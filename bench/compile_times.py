"""Compile every problem under a folder on this machine: seconds, kernels, lines, and any fallback.

    python3 bench/compile_times.py problems [--markdown]

Prints one row per problem (a markdown table with --markdown, for docs/benchmarks.md); exits 1 where
a problem falls back to its original forward or takes 30 s or more (issue 17's bound).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchweld.bench.tasks import find_problems  # noqa: E402
from torchweld.pipeline import compile_problem  # noqa: E402
from torchweld.problem import load_problem  # noqa: E402

SECONDS = 30


def measure(path: Path) -> tuple[float, int, int, str]:
    """(seconds, kernels, lines of the file, fallback reason or '')."""
    start = time.perf_counter()
    try:
        result = compile_problem(load_problem(path))
    except Exception as e:  # the CLI would fall back here: reported, not raised
        return time.perf_counter() - start, 0, 0, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return time.perf_counter() - start, len(result.plan.kernels), result.source.count("\n"), ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", type=Path, help="a folder of problem files (searched recursively) or one file")
    ap.add_argument("--markdown", action="store_true", help="a markdown table")
    args = ap.parse_args()
    paths = find_problems(args.problems)
    bad, total = 0, 0.0
    if args.markdown:
        print("| problem | compile (s) | kernels | lines | fallback |\n|---|---:|---:|---:|---|")
    for path in paths:
        seconds, kernels, lines, why = measure(path)
        total += seconds
        bad += bool(why) or seconds >= SECONDS
        name = path.relative_to(args.problems.resolve()).as_posix() if args.problems.is_dir() else path.name
        if args.markdown:
            print(f"| `{name}` | {seconds:.2f} | {kernels} | {lines} | {why} |")
        else:
            print(f"{seconds:7.2f} s  {kernels:3d} kernels  {lines:5d} lines  {name}  {why}", flush=True)
    print(f"\n{len(paths)} problems, {total:.1f} s in all, {bad} over {SECONDS} s or falling back", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
