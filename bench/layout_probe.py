"""Layout planning, measured: each problem with a convolution compiled with and without it, eager
and both files timed in one process (strict fp32, L2 flushed, events, median), and the (format,
cudnn.benchmark) pair each site picked with the times it measured. One JSON line per problem.

    python3 bench/layout_probe.py OUT.jsonl [PROBLEM_DIR_OR_FILE ...]
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    import torch

    from torchweld.judge.first import compare
    from torchweld.judge.timing import medians
    from torchweld.judge.correctness import to_cuda
    from torchweld.judge.guards import set_fp32
    from torchweld.pipeline import Options, compile_problem
    from torchweld.problem import load_module, load_problem

    set_fp32(False)
    out = Path(argv[0])
    roots = [Path(a) for a in argv[1:]] or [Path("problems")]
    files = sorted(f for r in roots for f in ([r] if r.is_file() else r.rglob("*.py")))
    tmp = Path(tempfile.mkdtemp())
    for f in files:
        problem = load_problem(f)
        result = compile_problem(problem)
        if "_tw_conv(" not in result.source:
            continue
        row = {"problem": f"{f.parent.name}/{f.stem}"}
        try:
            models = {}
            for label, opts in (("plain", Options(layout_plan=False)), ("planned", Options())):
                path = tmp / f"{f.parent.name}_{f.stem}_{label}.py"
                path.write_text(compile_problem(problem, opts).source)
                module = load_module(path, path.read_text(), prefix=f"tw_probe_{label}")
                torch.manual_seed(0)
                models[label] = module.ModelNew(*problem.init_inputs()).cuda()
            ref = problem.build_model(0).cuda()
            for m in models.values():
                m.load_state_dict(ref.state_dict())
            sets = []
            for s in range(3):
                torch.manual_seed(100 + s)
                sets.append(to_cuda(problem.inputs()))
            with torch.no_grad():
                for label, m in models.items():
                    ok, _, rel, _ = compare(m(*sets[0]), ref(*sets[0]))
                    row[f"{label}_ok"], row[f"{label}_rel"] = ok, rel
                plans = models["planned"].__dict__.get("_tw_conv_plans", {})
                row["picked"] = {str(key): [str(p[0][0]), p[0][1], [round(t, 4) for t in p[1]]] for key, p in plans.items()}
                row["eager"] = medians({"fn": ref}, sets, 60)["fn"]
                for label, m in models.items():
                    row[label] = medians({"fn": m}, sets, 60)["fn"]
                row["eager_again"] = medians({"fn": ref}, sets, 60)["fn"]
        except Exception as e:  # recorded; the probe goes on
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(row), flush=True)
        with out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
