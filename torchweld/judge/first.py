"""The first check `torchweld compile` runs on a GPU: build, compare on fresh inputs, time.

The full judge is `torchweld check`; this is the quick look a user gets right after compiling.
Like the judge, it compares and times under strict fp32 (TF32 off for cuBLAS and cuDNN), set by the
judge's one switch (guards.fp32_mode), and grades with the judge's tolerance table.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from torchweld.judge.guards import fp32_mode
from torchweld.judge.timing import medians
from torchweld.judge.tolerance import TF32, Tol, compare_tensor
from torchweld.judge.correctness import clone_all, to_dev
from torchweld.problem import Problem, load_module


@dataclass
class FirstCheck:
    ok: bool = True
    build_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    max_abs: float = 0.0
    rel: float = 0.0
    times_ms: dict[str, float] = field(default_factory=dict)

    def text(self) -> str:
        lines = [f"built in {self.build_s:.1f} s",
                 f"correct on fresh inputs: {'yes' if self.ok else 'NO'} (max abs error {self.max_abs:.3g}, "
                 f"relative {self.rel:.3g})"]
        lines += [f"  {e}" for e in self.errors]
        if self.times_ms:
            eager = self.times_ms.get("eager")
            for name, ms in self.times_ms.items():
                speed = f"  {eager / ms:.2f}x vs eager" if eager and ms == ms else ""
                lines.append(f"  {name:<14} {ms:8.3f} ms{speed}")
        return "\n".join(lines)


def compare(out, ref, tolerance: dict | None = None) -> tuple[bool, float, float, str]:
    """One output against the reference at the judge's table tolerance (judge/tolerance.py), where
    `tolerance` maps a dtype to a Tol (or one number for atol and rtol) that replaces its row:
    (ok, max abs error, relative error, why not)."""
    tol = (tolerance or {}).get(getattr(ref, "dtype", None))
    if tol is not None and not isinstance(tol, Tol):
        tol = Tol(tol, tol)
    if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor):
        got = type(out).__name__ if not isinstance(out, torch.Tensor) else "a tensor"
        return False, math.inf, math.inf, f"output {got} where the reference returns {type(ref).__name__}"
    v = compare_tensor(out, ref, mode="table", tol=tol)
    max_abs = math.inf if v["max_abs"] is None else v["max_abs"]
    rel = math.inf if v["rel"] is None else v["rel"]
    return v["ok"], max_abs, rel, v["why"]


def _outputs(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def first_check(problem: Problem, path: Path, trials: int = 3, timing: bool = True, tf32: bool = False) -> FirstCheck:
    """Correct on `trials` fresh inputs, then eager/torch.compile/ModelNew times, all in strict fp32;
    `tf32`: the file was compiled with --precision tf32, so all three run with TF32 allowed and fp32
    is held to the table's TF32 row."""
    with fp32_mode(tf32):
        return _first_check(problem, path, trials, timing, {torch.float32: TF32} if tf32 else {})


def _first_check(problem: Problem, path: Path, trials: int, timing: bool, tolerance: dict) -> FirstCheck:
    report = FirstCheck()
    start = time.perf_counter()
    module = load_module(Path(path), Path(path).read_text(), prefix="torchweld_new")
    report.build_s = time.perf_counter() - start
    ref = problem.build_model(seed=0).cuda()
    torch.manual_seed(0)
    new = module.ModelNew(*problem.init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    input_sets = []
    with torch.no_grad():
        for t in range(trials):
            torch.manual_seed(1000 + t)
            inputs = to_dev(problem.inputs(), "cuda")
            input_sets.append(inputs)
            want = _outputs(ref(*clone_all(inputs)))
            got = _outputs(new(*clone_all(inputs)))
            torch.cuda.synchronize()
            for o, w in zip(got, want):
                ok, max_abs, rel, why = compare(o, w, tolerance)
                report.max_abs, report.rel = max(report.max_abs, max_abs), max(report.rel, rel)
                if not ok:
                    report.ok = False
                    report.errors.append(f"inputs {t}: {why}")
        if timing and report.ok:
            fns = {"eager": ref}
            try:
                compiled = torch.compile(ref)
                compiled(*input_sets[0])
                fns["torch.compile"] = compiled
            except Exception as e:  # torch.compile failing is information, not our failure
                report.errors.append(f"torch.compile failed: {type(e).__name__}")
            fns["ModelNew"] = new
            report.times_ms.update(medians(fns, input_sets))
    return report
