"""Render the per-problem table of docs/benchmarks.md from a judged bench run and a quick_times run.

    python3 bench/benchmarks_md.py out/bench/corpus out/bench/quick/times.jsonl > table.md
    python3 bench/benchmarks_md.py - out/q2/times.jsonl > table.md      # quick rows only
    python3 bench/benchmarks_md.py out/bench/all - judged-h100.json > table.md   # judged rows only
    python3 bench/benchmarks_md.py out/bench/a,out/bench/b - judged.json > table.md  # two runs' rows
Also writes the compact rows it used to docs/data/ (the evidence behind the table).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchweld.bench.tasks import load_results  # noqa: E402


def judged(results_dir: Path) -> list[dict]:
    rows = []
    for r in load_results(results_dir):
        t, warm = r.get("timing") or {}, r.get("prewarm") or {}
        rows.append({"key": r.get("key"), "source": "judge", "ok": r.get("outcome") == "correct",
                     "outcome": r.get("outcome"),
                     "eager": t.get("eager_ms"), "compile": t.get("compile_ms"), "new": t.get("candidate_ms"),
                     "new_repeat": t.get("candidate_ms_repeat"), "build_warm": r.get("build_s"),
                     "build_cold": warm.get("candidate_build_cold_s"), "compile_cold": warm.get("compile_cold_s")})
    return rows


def quick(lines: Path) -> list[dict]:
    rows = []
    for line in lines.read_text().splitlines():
        r = json.loads(line)
        t, warm = r.get("times_ms") or {}, r.get("prewarm") or {}
        rows.append({"key": r["key"], "source": "quick", "ok": r.get("ok"), "eager": t.get("eager"),
                     "compile": t.get("torch.compile"), "new": t.get("ModelNew"), "new_repeat": None,
                     "build_warm": None, "build_cold": warm.get("candidate_build_cold_s"),
                     "compile_cold": warm.get("compile_cold_s")})
    return rows


def f(v, digits=3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def x(a, b) -> str:
    return "–" if not a or not b else f"{a / b:.2f}x"


def geomean(values) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> int:
    rows = (([] if sys.argv[1] == "-" else [r for d in sys.argv[1].split(",") for r in judged(Path(d))])
            + ([] if sys.argv[2] == "-" else quick(Path(sys.argv[2]))))
    rows.sort(key=lambda r: r["key"])
    name = sys.argv[3] if len(sys.argv) > 3 else "corpus-h100.json"
    data = Path(__file__).resolve().parents[1] / "docs" / "data" / name
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(json.dumps(rows, indent=1) + "\n")
    print("| problem | how | correct | eager ms | torch.compile ms | ModelNew ms | vs eager | vs compile "
          "| build warm s | build cold s | torch.compile cold s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ok = "yes" if r["ok"] else f"NO ({r.get('outcome') or 'wrong'})"
        print(f"| {r['key'].replace('__', '/')} | {r['source']} | {ok} | {f(r['eager'])} "
              f"| {f(r['compile'])} | {f(r['new'])} | {x(r['eager'], r['new'])} | {x(r['compile'], r['new'])} "
              f"| {f(r['build_warm'], 2)} | {f(r['build_cold'], 1)} | {f(r['compile_cold'], 1)} |")
    print()
    cats = sorted({r["key"].split("__")[0] for r in rows})
    print("| category | problems (correct) | geomean vs eager | geomean vs torch.compile | faster than eager | faster than torch.compile |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in cats + ["all"]:
        every = [r for r in rows if c == "all" or r["key"].startswith(c + "__")]
        sel = [r for r in every if r["ok"]]  # NOTE: speeds of correct rows only
        ge = geomean([r["eager"] / r["new"] for r in sel if r["eager"] and r["new"]])
        gc = geomean([r["compile"] / r["new"] for r in sel if r["compile"] and r["new"]])
        fe = sum(1 for r in sel if r["eager"] and r["new"] and r["new"] < r["eager"])
        fc = sum(1 for r in sel if r["compile"] and r["new"] and r["new"] < r["compile"])
        print(f"| {c} | {len(every)} ({len(sel)}) | {ge:.2f}x | {gc:.2f}x | {fe}/{len(sel)} | {fc}/{len(sel)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
