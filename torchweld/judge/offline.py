"""Build-only judging, where there is no GPU (or with --build-only): what can be checked without running.

The candidate is imported with its `load_inline` / `load` calls recorded (record.py); each extension's
files are laid out as load_inline writes them (layout.py), compiled side by side with the compilers and
flags torch's build uses, and their objects' symbols matched, as importing the built module would. The
outcome is `no_build` with the compiler's first error and the candidate line it points at, or `no_gpu`
("builds; not run: no GPU"): never a verdict on what the candidate computes.
"""
from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from torchweld.judge import symbols
from torchweld.judge.build import _TRITON, build_failure, summarize_build_log
from torchweld.judge.layout import Unit, command, write_units
from torchweld.judge.record import Extension, import_recorded, needs_gpu, recording

_ERROR_AT = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+): error")
_BUILDS_LATER = re.compile(r"\bload(?:_inline)?\s*\(")
_USES_TRITON = re.compile(r"^\s*(?:import|from)\s+triton\b", re.M)


@dataclass(frozen=True)
class Step:
    """One compiler run: `status` is ok, failed, stopped (another file failed first), timeout or missing."""

    file: str
    compiler: str
    seconds: float
    status: str
    output: str = ""
    obj: Path | None = None  # the object file, where it compiled

    def to_dict(self) -> dict:
        return {"file": self.file, "compiler": self.compiler, "seconds": round(self.seconds, 2), "status": self.status}


@dataclass(frozen=True)
class Built:
    """One extension compiled: `error` is None when it builds; else one line, with `details` under it."""

    ext: Extension
    steps: tuple[Step, ...]
    error: str | None = None
    details: tuple[str, ...] = ()
    timed_out: bool = False

    def to_dict(self) -> dict:
        return {"name": self.ext.name, "kind": self.ext.kind, "line": self.ext.line,
                "steps": [s.to_dict() for s in self.steps], "error": self.error}


def _tree(pid: int) -> list[int]:
    """`pid` and every live process below it, from /proc."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            kids.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += kids.get(p, [])
    return found


def _kill(proc: subprocess.Popen) -> None:
    """Kill a compiler and what it started (nvcc runs cicc, ptxas, gcc): each stopped first, so none starts more."""
    stopped: list[int] = []
    for _ in range(5):
        new = [p for p in _tree(proc.pid) if p not in stopped]
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
        stopped += new
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def compile_units(ext: Extension, units: list[Unit], folder: Path, deadline: float) -> list[Step]:
    """Compile every unit at once (as ninja would); the first failure or the deadline stops the others."""
    steps: dict[str, Step] = {}
    running = []
    for i, unit in enumerate(units):
        compiler = "nvcc" if unit.cuda else "c++"
        obj = folder / f"{i}_{unit.path.stem}{'.cuda' if unit.cuda else ''}.o"
        cmd = command(ext, unit, obj)
        if cmd is None:
            steps[unit.name] = Step(unit.name, compiler, 0.0, "missing")
            continue
        log = folder / f"{i}_{unit.name}.log"
        try:
            with open(log, "wb") as out:
                # NOTE: the C locale: plain quotes in gcc's messages. The compilers stay in this process's group,
                # so the parent's kill on its timeout reaches them.
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        cwd=folder, env=dict(os.environ, LC_ALL="C", LANG="C"))
        except OSError:  # not there after all, or not runnable
            steps[unit.name] = Step(unit.name, compiler, 0.0, "missing")
            continue
        running.append((unit, compiler, proc, log, time.monotonic(), obj))
    ended: dict[str, float] = {}
    stop = None
    while len(ended) < len(running):
        now = time.monotonic()
        for unit, _, proc, _, t0, _ in running:
            if unit.name not in ended and proc.poll() is not None:
                ended[unit.name] = now - t0
        if len(ended) == len(running):
            break
        if now > deadline:
            stop = "timeout"
        elif any(r[2].returncode not in (None, 0) for r in running):
            stop = "stopped"
        if stop:
            for unit, compiler, proc, _, t0, _ in running:
                if unit.name not in ended:
                    _kill(proc)
                    ended[unit.name] = now - t0
                    steps[unit.name] = Step(unit.name, compiler, now - t0, stop)
            break
        time.sleep(0.1)
    for unit, compiler, proc, log, _, obj in running:
        if unit.name not in steps:
            status = "ok" if proc.returncode == 0 else "failed"
            steps[unit.name] = Step(unit.name, compiler, ended[unit.name], status, log.read_text(errors="replace"),
                                    obj if status == "ok" else None)
    return [steps[u.name] for u in units]


def build(ext: Extension, source: str, folder: Path, deadline: float) -> Built:
    """Lay out and compile one recorded extension; on success, match its objects' symbols."""
    units = write_units(ext, folder)
    missing = [f for f in ext.files if not Path(f).is_file()]
    if missing:
        return Built(ext, (), f"extension {ext.name} failed to build: load() source {missing[0]} does not exist")
    steps = compile_units(ext, units, folder, deadline)
    failed = next((s for s in steps if s.status == "failed"), None)
    if failed is not None:
        return _compile_error(ext, units, failed, source, tuple(steps))
    if any(s.status == "timeout" for s in steps):
        late = ", ".join(f"{s.compiler} {s.file}" for s in steps if s.status == "timeout")
        return Built(ext, tuple(steps), f"extension {ext.name}: the build did not finish in time ({late} "
                                        f"still running)", timed_out=True)
    unresolved = symbols.unresolved([(s.file, s.obj) for s in steps if s.obj], _texts(ext))
    if unresolved:
        return Built(ext, tuple(steps), f"extension {ext.name} failed to link: {unresolved[0]}",
                     tuple(unresolved[1:]))
    return Built(ext, tuple(steps))


def _texts(ext: Extension) -> str:
    """Every source the extension compiles, as one text (which names are the candidate's own)."""
    texts = [*ext.cpp_sources, *ext.cuda_sources]
    for f in ext.files:
        try:
            texts.append(Path(f).read_text(errors="replace"))
        except OSError:
            pass
    return "\n".join(texts)


def _compile_error(ext: Extension, units: list[Unit], step: Step, source: str, steps: tuple) -> Built:
    """The first error lines, as the GPU judge gives them, and the candidate line the first points at."""
    failure = build_failure(RuntimeError(f"Error building extension '{ext.name}'"), step.output, 0.0)
    _, errors, _ = summarize_build_log(step.output)
    if not errors:
        last = [ln.strip() for ln in step.output.splitlines() if ln.strip()][-1:] or ["no output"]
        return Built(ext, steps, f"extension {ext.name} failed to build: {step.compiler} {step.file}: {last[0]}"[:400])
    at = _ERROR_AT.match(errors[0])
    unit = next((u for u in units if at and u.name == at.group("file")), None)
    where = _where(ext, unit, int(at.group("line")), source) if unit else []
    return Built(ext, steps, failure.message, tuple(where + list(failure.details)))


def _where(ext: Extension, unit: Unit, line: int, source: str) -> list[str]:
    """`main.cpp:6` -> what load_inline wrote there, and the candidate's line it came from."""
    origin = unit.origin(line)
    written = unit.path.read_text(errors="replace").splitlines() if unit.path.is_file() else []
    text = written[line - 1].strip() if 0 < line <= len(written) else ""
    lines = source.splitlines()
    if origin is None:
        return [f"{unit.name}:{line} is `{text}`"] if text else []
    if origin[0] == "functions":
        name = origin[1]
        at = _functions_line(source, ext, name)
        out = [f"{unit.name}:{line} is the binding load_inline writes for {name} (functions=[...]): `{text}`"]
        if at:
            out.append(f"candidate line {at}: {lines[at - 1].strip()}")
        declared = any(re.search(rf"\b{re.escape(name)}\s*\(", p) for p in ext.cpp_sources)
        defined = next((i for i, p in enumerate(ext.cuda_sources) if re.search(rf"\b{re.escape(name)}\s*\(", p)), None)
        if not declared:
            hint = f"{name} is never declared in cpp_sources, and main.cpp (where the binding is) sees only those"
            if defined is not None:
                k = next(k for k, ln in enumerate(ext.cuda_sources[defined].split("\n"))
                         if re.search(rf"\b{re.escape(name)}\s*\(", ln))
                cand = piece_line(source, ext.cuda_sources[defined], k)
                hint += "; cuda_sources defines it" + (f" (candidate line {cand})" if cand else "")
            out.append(hint + ": declare it in cpp_sources")
        return out
    kind, piece, k = origin
    at = piece_line(source, (ext.cpp_sources if kind == "cpp_sources" else ext.cuda_sources)[piece], k)
    return [f"{unit.name}:{line} is line {k + 1} of {kind}[{piece}]" +
            (f": candidate line {at}: {lines[at - 1].strip()}" if at else f": `{text}`")]


def piece_line(source: str, piece: str, k: int) -> int | None:
    """The candidate line holding line k (0-based) of a source string, where it can be told."""
    pos = source.find(piece) if piece.strip() else -1
    if pos >= 0 and source.find(piece, pos + 1) < 0:
        return source.count("\n", 0, pos) + 1 + k
    want = piece.split("\n")[k].strip() if k < len(piece.split("\n")) else ""
    hits = [i for i, ln in enumerate(source.splitlines(), 1) if ln.strip() == want] if len(want) >= 4 else []
    return hits[0] if len(hits) == 1 else None


def _functions_line(source: str, ext: Extension, name: str) -> int | None:
    """The line of `name` in the `functions=` of the load_inline call at the extension's line."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ext.line
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if ext.line is None or not call.lineno <= ext.line <= (call.end_lineno or call.lineno):
            continue
        for kw in (k for k in call.keywords if k.arg == "functions"):
            hits = [e.lineno for e in ast.walk(kw.value) if isinstance(e, ast.Constant) and e.value == name]
            return hits[0] if hits else kw.value.lineno
    return ext.line


def stage(j, problem, why: str) -> None:
    """The build stage without a GPU; ends judging (j.finish) with no_build, timeout or no_gpu."""
    j.stage("build")
    source = j.source_path.read_text()
    t0 = time.monotonic()
    deadline = j.t0 + j.opts.timeout_s * 0.95 - 5.0
    log = j.result_path.with_name("build.log")
    found: list[Extension] = []
    imported = import_recorded(j.source_path, source, log, found)
    gpu = needs_gpu(imported.error) if imported.error else None
    notes = []
    if imported.module is not None and not found and _BUILDS_LATER.search(source):
        # NOTE: an extension built in ModelNew's constructor is recorded by building the model on the CPU.
        with recording(j.source_path, found):
            try:
                imported.module.ModelNew(*problem.init_inputs())
            except Exception as e:  # noqa: BLE001 - the candidate's own code; a GPU judge would say more
                if needs_gpu(e):
                    gpu = gpu or needs_gpu(e)
                else:
                    notes.append(f"constructing ModelNew on the CPU failed: {type(e).__name__}: {str(e)[:200]}")
    built = []
    with tempfile.TemporaryDirectory(prefix="torchweld-build-") as tmp:
        for i, ext in enumerate(found):
            b = build(ext, source, Path(tmp) / str(i), max(deadline, time.monotonic() + 1.0))
            built.append(b)
            if b.error:
                break
    j.r["build"] = {"extensions": [b.to_dict() for b in built], "import_s": round(imported.seconds, 2),
                    "seconds": round(time.monotonic() - t0, 2)}
    j.r["build_s"] = j.r["build"]["seconds"]
    j.r["details"] += notes
    bad = next((b for b in built if b.error), None)
    if bad is not None:
        j.r["details"] += list(bad.details)
        j.finish("timeout" if bad.timed_out else "no_build", bad.error)
    if imported.error is not None:
        j.r["details"] += imported.error.details
        if gpu is None:
            j.finish("no_build", imported.error.message)
    j.r["details"] += [_steps_line(b) for b in built]
    j.finish("no_gpu", "; ".join(_said(built, source, gpu) + [f"not run: {why}"]))


def _said(built: list[Built], source: str, gpu: str | None) -> list[str]:
    """What the build-only check found, in the words of the one-line message."""
    triton = bool(_TRITON.search(source) or _USES_TRITON.search(source))
    missing = [f"{s.file} not compiled: no {s.compiler} here" for b in built for s in b.steps if s.status == "missing"]
    if built:
        compiled = any(s.status == "ok" for b in built for s in b.steps)
        said = ["partly builds" if missing and compiled else "not built" if missing else "builds"] + missing
    elif gpu:
        said = []
    else:
        said = ["imports"] + ([] if triton else ["nothing to build (no load_inline or load)"])
    if triton:
        said.append("not built: Triton needs a GPU")
    if gpu and not (triton and "triton" in gpu):
        said.append(f"its import needs a GPU ({gpu})")
    return said


def _steps_line(b: Built) -> str:
    """`extension x (candidate line 58): main.cpp (c++, 35.0 s), cuda.cu (nvcc, 61.2 s); its symbols resolve`."""
    steps = ", ".join(f"{s.file} ({s.compiler}, {s.seconds:.1f} s)" if s.status == "ok" else f"{s.file} ({s.status})"
                      for s in b.steps)
    whole = all(s.status == "ok" for s in b.steps)
    return f"extension {b.ext.name} (candidate line {b.ext.line}): {steps}" + ("; its symbols resolve" if whole else "")
