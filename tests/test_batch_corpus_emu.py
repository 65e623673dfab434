"""Every corpus problem whose batch is a runtime size, at batch 1 and 2 (a slice of its own inputs) on the CPU
emulator, and where its sequence length is one too, at lengths 1 and 3: its kernels run, never the original
forward, and match eager within the judge's tolerance for the output's dtype (small slices keep the emulator
quick; 3x the captured batch is tests/gpu/test_batch_gpu.py's).
By default one problem in eight of each family, within CI's time budget;
`--full-sweep` runs all of them. tests/test_corpus_compile.py counts the runtime-batch files over the whole corpus.

NOTE: each chunk of problems runs in a process of its own: every emulated library keeps its threads' stacks
mapped, and a process holding over a hundred of them runs out of memory maps."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = sorted(p for p in (ROOT / "problems").rglob("*.py") if p.name != "__init__.py")
CHUNK = 27
SAMPLE = 8  # NOTE: one problem in SAMPLE by default


def pytest_generate_tests(metafunc):
    if "paths" in metafunc.fixturenames:
        families = sorted({p.parent for p in PROBLEMS})
        chosen = PROBLEMS if metafunc.config.getoption("--full-sweep") else [
            p for f in families for p in [q for q in PROBLEMS if q.parent == f][::SAMPLE]]
        chunks = [chosen[i:i + CHUNK] for i in range(0, len(chosen), CHUNK)]
        metafunc.parametrize("paths", [[str(p) for p in c] for c in chunks],
                             ids=[f"{c[0].parent.name}-{c[0].stem}+{len(c) - 1}" for c in chunks])


def check(path: Path, workdir: Path) -> str:
    """'ok', 'specialised', or what went wrong at batch 1 or 2, or a sequence length of 1 or 3 (the emulated
    file written under `workdir`)."""
    import torch

    from emulator import emulate, force_conv_layout, launching, mismatch
    from torchweld.judge.tolerance import TABLE
    from torchweld.pipeline import compile_problem
    from torchweld.problem import load_problem

    problem = load_problem(path)
    result = compile_problem(problem)
    if not result.plan.guard.batch:
        return "specialised"
    new_cls, _ = emulate(result, workdir)
    ref = problem.build_model(0)
    new = new_cls(*problem.init_inputs())
    new.load_state_dict(ref.state_dict())
    force_conv_layout(new, False)
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    lib = sys.modules[type(new).__module__]._LIB
    inputs = problem.inputs()
    sizes = [(1, None), (2, None)] + [(1, 1), (2, 3)] * bool(result.plan.guard.seq)
    for batch, seq in sizes:
        xs = [x[:batch, :seq].clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        del lib.launched[:]
        with torch.no_grad():
            want = ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs])
            got = new(*xs)
        if set(lib.launched) != launching(result.plan):
            return f"batch {batch}, length {seq}: launched {lib.launched}"
        for g, w in zip(*[o if isinstance(o, (tuple, list)) else (o,) for o in (got, want)]):
            tol = TABLE.get(w.dtype, TABLE[torch.float32])
            if m := mismatch(g, w, 10 * tol.rtol, 10 * tol.atol):
                return f"batch {batch}, length {seq}: {m}"
    return "ok"


@pytest.mark.skipif(__import__("shutil").which("g++") is None, reason="g++ not installed")
def test_corpus_problems_at_batch_one_and_two(paths):
    proc = subprocess.run([sys.executable, __file__, *paths], capture_output=True, text=True, timeout=1200)
    said = dict(line.split(" :: ", 1) for line in proc.stdout.splitlines() if " :: " in line)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = {p: s for p, s in said.items() if s not in ("ok", "specialised")}
    assert set(said) == set(paths) and not bad, bad or proc.stderr[-3000:]
    assert "ok" in said.values()


if __name__ == "__main__":
    import tempfile

    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    with tempfile.TemporaryDirectory() as tmp:
        for arg in sys.argv[1:]:
            try:
                verdict = check(Path(arg), Path(tmp))
            except Exception as e:  # NOTE: said per problem, so that one failing names itself
                verdict = f"{type(e).__name__}: {e}".replace("\n", " ")[:500]
            print(f"{arg} :: {verdict}", flush=True)
