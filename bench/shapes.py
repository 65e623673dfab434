"""On a GPU: eager against our ModelNew at other batch sizes and sequence lengths than captured, from one
emission per problem (issue 16: "correct and not slower at batch sizes 1, the captured one and 3x").

    python3 bench/shapes.py OUT_DIR [-k SUBSTRING ...] [--reps N] [--compile]

For each corpus problem whose batch is a runtime size: batch 1, the captured one and 3x it; where its sequence
length is one too, also half and twice the captured length. Inputs are the problem's own, repeated. Each size is
checked against eager (1e-4 fp32, 1e-2 fp16/bf16, strict fp32) and timed by CUDA events after an L2 flush, the
median of N (default 20), PyTorch's default flags; with --compile, torch.compile's module too, in the same run
(it compiles again for each new shape, during the warm-up calls: minutes per problem). Writes OUT_DIR/shapes.md (a table for docs/benchmarks.md) and
OUT_DIR/shapes.json, and prints each row as it goes.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from kernel_bench import median_ms  # noqa: E402

from torchweld.pipeline import compile_problem  # noqa: E402
from torchweld.problem import load_module, load_problem  # noqa: E402


def sizes(b: int, s: int) -> list[tuple[int, int]]:
    """(batch, sequence length or 0) to run: the batch's three, then the sequence's two where it is a runtime size."""
    out = [(1, 0), (b, 0), (3 * b, 0)]
    return out + [(b, max(1, s // 2)), (b, 2 * s)] * bool(s)


def grown(x, batch: int, seq: int):
    """Input `x` at `batch` (and `seq`), its own values repeated."""
    if not isinstance(x, torch.Tensor):
        return x
    x = torch.cat([x] * -(-batch // x.shape[0]))[:batch]
    return torch.cat([x] * -(-seq // x.shape[1]), 1)[:, :seq] if seq else x


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    tol = 1e-2 if want.dtype in (torch.float16, torch.bfloat16) else 1e-4
    if not want.is_floating_point():
        return torch.equal(got, want)
    return got.shape == want.shape and torch.allclose(got.double(), want.double(), atol=tol, rtol=tol)


def run(path: Path, reps: int, flush, work: Path, compiled: bool = False) -> list[dict]:
    prob = load_problem(path)
    result = compile_problem(prob)
    if not result.plan.guard.batch:
        return []
    file = work / f"{path.stem}_new.py"
    file.write_text(result.source)
    module = load_module(file, file.read_text(), prefix="tw_shapes")
    ref = prob.build_model(0).cuda().eval()
    new = module.ModelNew(*prob.init_inputs()).cuda().eval()
    new.load_state_dict(ref.state_dict())
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.inputs()]
    fast = torch.compile(ref) if compiled else None
    rows = []
    for batch, seq in sizes(result.plan.guard.batch[0], result.plan.guard.seq):
        xs = [grown(x, batch, seq) for x in inputs]
        row = {"problem": f"{path.parent.name}/{path.stem}", "batch": batch, "seq": seq}
        try:
            with torch.no_grad():
                torch.backends.cudnn.allow_tf32 = False  # NOTE: compared in strict fp32 (matmuls are by default)
                try:
                    want, got = ref(*xs), new(*xs)
                finally:
                    torch.backends.cudnn.allow_tf32 = True  # NOTE: PyTorch's defaults again for the timings
                row["ok"] = all(map(close, *[o if isinstance(o, (tuple, list)) else (o,) for o in (got, want)]))
                row["eager_ms"] = median_ms(lambda: ref(*xs), flush, reps)
                row["ours_ms"] = median_ms(lambda: new(*xs), flush, reps)
                if fast is not None:
                    row["compile_ms"] = median_ms(lambda: fast(*xs), flush, reps)
        except torch.cuda.OutOfMemoryError:
            row["error"] = "out of memory"
        except Exception as e:  # NOTE: said per size, so one failing names itself
            row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| problem | batch | seq | right | eager ms | torch.compile ms | ours ms | vs eager | vs compile |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['problem']} | {r['batch']} | {r['seq'] or '-'} | {r['error']} | | | | | |")
            continue
        comp = r.get("compile_ms")
        shown, vs = (f"{comp:.3f}", f"{comp / r['ours_ms']:.2f}x") if comp else ("-", "-")
        lines.append(f"| {r['problem']} | {r['batch']} | {r['seq'] or '-'} | {'yes' if r['ok'] else 'NO'} | "
                     f"{r['eager_ms']:.3f} | {shown} | {r['ours_ms']:.3f} | {r['eager_ms'] / r['ours_ms']:.2f}x | {vs} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("-k", nargs="*", default=[], help="problems whose path holds one of these")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="torch.compile's module too (compiles at each shape)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    paths = sorted(p for p in (HERE.parent / "problems").rglob("*.py")
                   if not args.k or any(k in str(p) for k in args.k))
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4 + 1, device="cuda")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for path in paths:
            rows += run(path, args.reps, flush, Path(work), args.compile)
    (args.out / "shapes.json").write_text(json.dumps(rows, indent=1))
    (args.out / "shapes.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
