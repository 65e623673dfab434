"""`--prewarm N`: build candidates and compile torch.compile's kernels in N parallel processes first.

Judging must time one problem at a time, but building extensions and running Inductor's compiler
need only CPU cores. Done up front in parallel, they fill the caches (torch extensions by content
hash, Inductor's FX graph and Triton caches), so the serial judge run spends its time timing.
Each problem's cold times are saved in RESULTS_DIR/prewarm/<key>.json and shown in the reports.
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

from torchweld.bench.tasks import Task


def prewarm_path(out: Path, key: str) -> Path:
    return out / "prewarm" / f"{key}.json"


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of torchweld's own sources: a candidate compiled by other code is compiled again."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def compiled_path(out: Path, key: str) -> Path:
    return out / "compiled" / f"{key}.json"


def compiled_by_prewarm(out: Path, key: str, candidate: Path) -> bool:
    """True when `candidate` was compiled by this very compiler (`compile_candidates`, prewarm) and is
    unchanged since."""
    try:
        record = json.loads(compiled_path(out, key).read_text())
        return (record.get("compiler") == compiler_fingerprint() and candidate.is_file()
                and record.get("candidate_sha") == file_sha(candidate))
    except (OSError, ValueError):
        return False


def _compile_one(task: Task, out: str) -> str | None:
    """In a fresh process: compile one problem to its candidate file and record by which compiler."""
    from torchweld.pipeline import compile_file

    try:
        task.candidate.parent.mkdir(parents=True, exist_ok=True)
        compile_file(task.problem, task.candidate)
    except Exception as e:  # the bench compiles it again when judging, and records the error then
        return f"{task.key}: {type(e).__name__}"
    path = compiled_path(Path(out), task.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": task.key, "compiler": compiler_fingerprint(),
                                "candidate_sha": file_sha(task.candidate)}))
    return None


def compile_candidates(tasks: list[Task], out: Path, processes: int, say=print) -> list[str]:
    """`--compile`: (re)write every candidate this compiler has not written yet, `processes` at a time,
    before resume decides what is left: a result stands only for the candidate file it judged."""
    todo = [t for t in tasks if t.compile and t.candidate is not None
            and not compiled_by_prewarm(out, t.key, t.candidate)]
    if not todo:
        return []
    say(f"compiling {len(todo)} problems, {processes} at a time")
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max(1, processes), mp_context=ctx) as pool:
        return [e for e in pool.map(_compile_one, todo, [str(out)] * len(todo)) if e]


def _warm_one(task: Task, out: str, gpu: str | None, compile_candidate: bool) -> dict:
    """In a fresh process: compile the candidate file, build it, and run torch.compile once."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    import torch

    from torchweld.judge.guards import set_fp32
    from torchweld.problem import load_module, load_problem

    set_fp32(False)  # NOTE: as the judge runs, so Inductor's cache keys match its compile

    record: dict = {"key": task.key}
    try:
        problem = load_problem(task.problem)
        if compile_candidate and task.candidate is not None and not compiled_by_prewarm(Path(out), task.key,
                                                                                           task.candidate):
            error = _compile_one(task, out)
            if error:
                raise RuntimeError(error)
        if task.candidate is not None and task.candidate.suffix == ".py" and task.candidate.is_file():
            t0 = time.perf_counter()
            load_module(task.candidate, task.candidate.read_text(), prefix="torchweld_prewarm")
            record["candidate_build_cold_s"] = round(time.perf_counter() - t0, 3)
        model = problem.build_model(0).cuda()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.inputs()]
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.compile(model)(*inputs)
        torch.cuda.synchronize()
        record["compile_cold_s"] = round(time.perf_counter() - t0, 3)
    except Exception as e:  # the judge will meet the same failure and report it properly
        record["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    path = prewarm_path(Path(out), task.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


def prewarm(tasks: list[Task], out: Path, processes: int, gpu: str | None, say=print) -> list[dict]:
    """Warm every task's caches, `processes` at a time; already-warmed tasks are skipped."""
    todo = [t for t in tasks if not prewarm_path(out, t.key).is_file()]
    if not todo or processes < 1:
        return []
    say(f"prewarm: building candidates and torch.compile caches for {len(todo)} problems, {processes} at a time")
    ctx = multiprocessing.get_context("spawn")
    records = []
    with concurrent.futures.ProcessPoolExecutor(processes, mp_context=ctx) as pool:
        futures = [pool.submit(_warm_one, t, str(out), gpu, t.compile) for t in todo]
        for f in concurrent.futures.as_completed(futures):
            try:
                records.append(f.result())
            except Exception as e:  # a crashed process: the judge reports the problem itself
                records.append({"error": f"prewarm process died: {type(e).__name__}"})
    return records


def load_prewarm(out: Path) -> dict[str, dict]:
    """Saved cold times by result key (empty when the run was not prewarmed)."""
    found = {}
    for path in (out / "prewarm").glob("*.json") if (out / "prewarm").is_dir() else []:
        try:
            record = json.loads(path.read_text())
            found[record.get("key", path.stem)] = record
        except (OSError, ValueError):
            continue
    return found
