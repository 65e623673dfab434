"""The judge's time per candidate, today's judge against an older tree's, same problems, same GPU (issue 18).

    python3 bench/judge_overhead.py OLD_TREE OUT_DIR PROBLEM:CANDIDATE [PROBLEM:CANDIDATE ...]

OLD_TREE is a checkout of the judge to compare with (for issue 18: c261832, the last judge that ran the
candidate in its own process; `git archive c261832 | tar -x -C DIR`). Each pair is checked with
`torchweld check --json` under both trees, alternating old/new, REPEATS (env TW_REPEATS, default 3) times each; the first round of
each warms the extension build cache and is not counted. Writes OUT_DIR/judge_overhead.md (a table for
docs/benchmarks.md) and prints it.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEATS = int(os.environ.get("TW_REPEATS", "3"))
HERE = Path(__file__).resolve().parent.parent


def one_check(tree: Path, problem: str, candidate: str) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torchweld", "check", "--json", problem, candidate],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    try:
        res = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        res = {"outcome": f"unreadable (exit {proc.returncode}): {proc.stderr[-300:]}"}
    return wall, res


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__)
        return 2
    old, out = Path(argv[0]).resolve(), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    pairs = [a.split(":", 1) for a in argv[2:]]
    pairs = [(str(Path(p).resolve()), str(Path(c).resolve())) for p, c in pairs]
    rows = []
    for problem, candidate in pairs:
        walls = {"old": [], "new": []}
        outcomes = {"old": set(), "new": set()}
        for rnd in range(REPEATS + 1):
            for name, tree in (("old", old), ("new", HERE)):
                wall, res = one_check(tree, problem, candidate)
                outcomes[name].add(res.get("outcome"))
                if rnd:
                    walls[name].append(wall)
                print(f"{Path(problem).stem} {name} round {rnd}: {wall:.1f} s, {res.get('outcome')}", flush=True)
        o, n = statistics.median(walls["old"]), statistics.median(walls["new"])
        rows.append((Path(problem).stem, o, n, n / o, "/".join(sorted(map(str, outcomes["old"]))),
                     "/".join(sorted(map(str, outcomes["new"])))))
        write_table(rows, out)
    return 0


def write_table(rows: list[tuple], out: Path) -> None:
    """The table so far (written after each problem, so that a run stopped at its limit keeps what it has)."""
    lines = ["| problem | old judge, s | today's judge, s | ratio | old outcome | today's outcome |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    lines += [f"| {p} | {o:.2f} | {n:.2f} | {r:.2f} | {oo} | {no} |" for p, o, n, r, oo, no in rows]
    total_o, total_n = sum(r[1] for r in rows), sum(r[2] for r in rows)
    lines.append(f"| **all** | {total_o:.2f} | {total_n:.2f} | {total_n / total_o:.2f} | | |")
    text = "\n".join(lines)
    (out / "judge_overhead.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
