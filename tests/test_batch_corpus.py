"""How many corpus problems get a runtime batch (plan/batch.py): the count must not drop, and the header
of each file says which dims are runtime sizes and which are specialised."""
from __future__ import annotations

from pathlib import Path

from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = sorted(p for p in (ROOT / "problems").rglob("*.py") if p.name != "__init__.py")
# NOTE: 82 of 208 when only pointwise kernels and library calls carried the batch; raise it as more do
AT_LEAST = 190


def test_corpus_files_with_a_runtime_batch_do_not_drop():
    runtime, kinds = [], set()
    for path in PROBLEMS:
        result = compile_problem(load_problem(path))
        plan = result.plan
        if plan.guard.batch:
            runtime.append(path)
            kinds |= {k.kind for k in plan.kernels if k.batch}
            assert "Runtime dims: the batch" in result.source, path
        else:
            assert "Specialised dims: every dim of" in result.source or "Runtime dims" not in result.source, path
    print(f"runtime batch: {len(runtime)} of {len(PROBLEMS)} corpus files")
    assert len(runtime) >= AT_LEAST, len(runtime)
    assert {"pointwise", "reduce", "pool", "depthwise"} <= kinds, kinds
