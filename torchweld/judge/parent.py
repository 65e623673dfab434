"""The judge's parent: extract and scan the candidate, judge it in a child process (child.py, the trusted
process, which runs the candidate in a process of its own), read its signed result."""
from __future__ import annotations

import ast
import contextlib
import hmac
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torchweld
from torchweld.judge.extract import CandidateError, load_candidate
from torchweld.judge import quiet, sandbox
from torchweld.judge.child import sign
from torchweld.judge.check_options import CheckOptions
from torchweld.judge.static import scan
from torchweld.problem import ProblemError, load_problem

_REPO_ROOT = str(Path(torchweld.__file__).resolve().parent.parent)


def _base(problem: Path, candidate: Path) -> dict:
    return {"problem": str(problem), "name": problem.stem, "candidate": str(candidate), "outcome": None,
            "message": "", "details": [], "build_s": None, "correctness": [], "generalization": [], "cheats": [],
            "static": [], "timing": None, "device": None, "torch": None, "precision": None, "extracted_from": None,
            "stage_s": {}, "buffers": [], "build": None, "work": None, "sandbox": None}


def gpu_present() -> bool:
    """Whether this machine has a CUDA GPU the judge can run on (without one it checks and builds only)."""
    import torch

    return torch.cuda.is_available()


def unbuildable(source: str) -> str | None:
    """Why a candidate cannot be a ModelNew, read from its text alone (no GPU, no child); None if it may be."""
    if not source.strip():
        return "the candidate is empty"
    try:
        ast.parse(source)
    except SyntaxError as e:
        return f"syntax error at line {e.lineno}: {e.msg}"
    if not re.search(r"\bModelNew\b", source):
        return "the candidate defines no class ModelNew (the name appears nowhere in it)"
    return None


def reply_lines(details: list[str], first: int) -> list[str]:
    """`candidate line N` of a block extracted from a reply (its first line at `first`) -> also the reply's."""
    def both(m):
        return f"{m.group(0)} (reply line {first + int(m.group(1)) - 1})"

    return [re.sub(r"\bcandidate line (\d+)", both, d) for d in details]


def _exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for the child to exit, without reaping it; False when `timeout` passed first."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _tail(path: Path, n: int = 4) -> list[str]:
    """The last meaningful lines a crashed child wrote to stderr."""
    try:
        lines = [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []
    return [ln[:300] for ln in lines[-n:]]


def _crash_message(rc: int, stage: str, stderr_tail: list[str]) -> str:
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        return f"the worker died of {sig} during {stage}"
    hint = next((ln for ln in reversed(stderr_tail) if "rror" in ln), stderr_tail[-1] if stderr_tail else "")
    return f"the worker exited with code {rc} during {stage}" + (f": {hint}" if hint else "")


def _run_child(problem: Path, candidate: Path, cand, opts: CheckOptions):
    """Run the trusted child to its end or the time limit: (its verified result, timed out, rc, stderr tail)."""
    key = secrets.token_hex(32).encode()
    with tempfile.TemporaryDirectory(prefix="torchweld-judge-") as tmp:
        tmp = Path(tmp)
        source_path = candidate.resolve()
        if cand.block is not None:
            source_path = tmp / f"{candidate.stem}_block{cand.block.index}.py"
            source_path.write_text(cand.source)
        (tmp / "options.json").write_text(opts.to_json())
        out_path, err_path = tmp / "stdout.log", tmp / "stderr.log"
        # NOTE: the result comes down a pipe, not a file: no file the candidate's process could write holds it.
        read_end, write_end = os.pipe()
        cmd = [sys.executable, "-m", "torchweld.judge.child", str(problem.resolve()), str(source_path),
               str(tmp / "options.json"), f"fd:{write_end}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH")) if p)
        # NOTE: Inductor compiles in this process, not in a pool of compile workers: the pool's threads and
        # processes start in the background; on a warm cache (the bench's --prewarm) it is also faster.
        # Compile time only: torch.compile's kernels are the same.
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        lines: list[bytes] = []
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            # NOTE: a session of its own, so a hang is killed with every process the candidate started.
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.PIPE, env=env,
                                    start_new_session=True, pass_fds=(write_end,))
            os.close(write_end)
            reader = threading.Thread(target=_read_lines, args=(read_end, lines), daemon=True)
            reader.start()
            with contextlib.suppress(OSError):
                proc.stdin.write(key + b"\n")
                proc.stdin.close()
            timed_out = not _exited(proc, opts.timeout_s)
            if timed_out:
                # NOTE: SIGTERM first: the child kills the candidate's processes (its subreaper's orphans too).
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, signal.SIGTERM)
                _exited(proc, 3.0)
            # NOTE: the whole session goes, the child's leftovers too; killed before the child is reaped,
            # so its group id is its own.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            rc = proc.wait()
            reader.join(timeout=10)
        quiet.judge_ended(proc.pid, opts.judges_dir)
        part = verified(lines, key)
        stderr_tail = _tail(err_path)
    return part, timed_out, rc, stderr_tail


def _read_lines(fd: int, into: list) -> None:
    """Every line the child writes to its result pipe, until it closes."""
    with os.fdopen(fd, "rb") as f:
        for line in f:
            into.append(line)


def verified(lines: list[bytes], key: bytes) -> dict:
    """The child's last result whose signature holds; {} where there is none; `forged` where the last is
    not the judge's."""
    for text in reversed(lines):
        try:
            saved = json.loads(text)
        except ValueError:
            continue  # NOTE: a line cut off by the time limit's kill, or empty
        try:
            if hmac.compare_digest(sign(key, saved["result"]), str(saved["sig"])):
                return saved["result"]
        except (KeyError, TypeError):
            pass
        break
    else:
        return {}
    from torchweld.judge.guards import cheat

    return {"forged": cheat("forged_result", "the result does not carry the judge's signature: someone else "
                                             f"wrote it: {text[:120]!r}")}


def check(problem_path, candidate_path, opts: CheckOptions | None = None) -> dict:
    """Grade a candidate; raises ProblemError / FileNotFoundError for unusable inputs, else returns the result."""
    opts = opts or CheckOptions()
    problem, candidate = Path(problem_path), Path(candidate_path)
    if not problem.is_file():
        raise ProblemError(f"{problem}: no such file")
    if not candidate.is_file():
        raise FileNotFoundError(f"{candidate}: no such file")
    # The problem is checked here, so an unusable one is a usage error even on a machine without a GPU.
    load_problem(problem).init_inputs()
    result = _base(problem, candidate)
    try:
        cand = load_candidate(candidate)
    except CandidateError as e:
        result.update(outcome="no_build", message=str(e))
        return result
    result["extracted_from"] = cand.extracted_from
    result["static"] = [f.to_dict() for f in scan(cand.source, problem.read_text(errors="replace"))]
    why = unbuildable(cand.source)
    if why:
        result.update(outcome="no_build", message=why)
        return result
    # NOTE: the result's key lives in this process's memory and the child's, neither readable by the
    # candidate's process (not dumpable, for the time of the check).
    was_dumpable = sandbox.dumpable_now()
    sandbox.nondumpable()
    try:
        part, timed_out, rc, stderr_tail = _run_child(problem, candidate, cand, opts)
    finally:
        if was_dumpable:
            sandbox.dumpable()
    if part.get("fatal") == "problem":
        raise ProblemError(part.get("message", f"{problem}: unusable problem"))
    stage = part.pop("stage", "start")
    for k, v in part.items():
        if k in result:
            result[k] = v
    if cand.block is not None:
        result["details"] = reply_lines(result["details"], cand.block.line)
    if part.get("forged"):
        result["outcome"], result["cheats"] = "cheat", result["cheats"] + [part["forged"]]
        result["message"] = f"caught by forged_result: {part['forged']['evidence']}"
    elif timed_out:
        result["outcome"] = "timeout"
        result["message"] = f"no result within {opts.timeout_s:g} s (still in {stage})"
    elif result["outcome"] is None:
        result["outcome"] = "runtime_error"
        result["message"] = _crash_message(rc, stage, stderr_tail)
        result["details"] += stderr_tail
    elif result["outcome"] == "runtime_error":
        result["details"] += [ln for ln in stderr_tail if "rror" in ln][-2:]
    return result
