"""Find problems, pair them with candidates, and store one result file per problem."""
from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from torchweld.judge.check_options import NOT_RUN

# A problem is recognised by its text, never by importing it: the parent process stays free of
# arbitrary problem code (and of CUDA), and a broken file becomes a judged failure, not a crash.
_MODEL_CLASS = re.compile(r"^class\s+Model\s*[(:]", re.M)
_REPLY_SUFFIXES = (".py", ".md", ".txt")
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "node_modules"}


@dataclass(frozen=True)
class Task:
    """One problem to judge, with where its candidate is (or will be compiled to)."""

    problem: Path
    rel: str  # posix path relative to the problems DIR
    category: str
    stem: str
    candidate: Path | None  # None: no candidate was found
    compile: bool = False  # True: compile the problem into `candidate` before judging

    @property
    def key(self) -> str:
        return result_key(self.category, self.stem)

    @property
    def label(self) -> str:
        return f"{self.category}/{self.stem}"


def result_key(category: str, stem: str) -> str:
    """The results file stem `<category>__<stem>`; nested categories join with `__` too."""
    return f"{category.replace('/', '__')}__{stem}"


def category_of(rel: Path) -> str:
    """The problem's parent directory relative to DIR, or "root" for files directly in it."""
    parent = rel.parent.as_posix()
    return "root" if parent in ("", ".") else parent


def is_problem_file(path: Path) -> bool:
    """A `.py` file (not `__init__.py`) whose text defines a top-level `class Model`."""
    if path.suffix != ".py" or path.name == "__init__.py":
        return False
    try:
        return bool(_MODEL_CLASS.search(path.read_text(errors="replace")))
    except OSError:
        return False


def find_problems(root: Path, exclude: tuple[Path, ...] = (), pattern: str | None = None) -> list[Path]:
    """Every problem file under `root`, sorted, skipping `exclude` trees (the output dir may live inside)."""
    root = root.resolve()
    excluded = [e.resolve() for e in exclude]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in _SKIP_DIRS and not d.startswith(".") and not any(_within(here / d, e) for e in excluded)
        )
        for name in sorted(filenames):
            path = here / name
            if is_problem_file(path) and (pattern is None or matches(path.relative_to(root), pattern)):
                found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def matches(rel: Path, pattern: str) -> bool:
    """`--filter GLOB` matches the relative path (`conv/*`) or the bare stem (`*gelu*`)."""
    return fnmatch.fnmatch(rel.as_posix(), pattern) or fnmatch.fnmatch(rel.stem, pattern)


def find_candidate(candidates: Path, rel: Path) -> Path | None:
    """`a/b/x.py` -> `CAND/a/b/x.{py,md,txt}`, else `CAND/x.{py,md,txt}` (model replies may be markdown)."""
    for base in (candidates / rel.parent, candidates):
        for suffix in _REPLY_SUFFIXES:
            path = base / f"{rel.stem}{suffix}"
            if path.is_file():
                return path
    return None


def plan_tasks(root: Path, problems: list[Path], candidates: Path | None, compile_into: Path | None) -> list[Task]:
    """Pair each problem with its candidate file (found, or the path `--compile` will write)."""
    root = root.resolve()
    candidates = candidates.resolve() if candidates is not None else None  # resume compares absolute paths
    tasks = []
    for path in problems:
        rel = path.relative_to(root)
        category = category_of(rel)
        if compile_into is not None:
            candidate, compile = compile_into / category / f"{rel.stem}.py", True
        else:
            candidate, compile = find_candidate(candidates, rel), False
        tasks.append(Task(path, rel.as_posix(), category, rel.stem, candidate, compile))
    return tasks


def duplicate_keys(tasks: list[Task]) -> list[str]:
    """Keys that two problems would share (`root/x.py` next to `x.py`); results would overwrite."""
    seen, dups = set(), []
    for t in tasks:
        if t.key in seen:
            dups.append(t.key)
        seen.add(t.key)
    return dups


def results_path(out: Path, key: str) -> Path:
    return out / "results" / f"{key}.json"


def write_json(path: Path, data) -> None:
    """Write atomically, so an interrupted run never leaves a half-written result that resume trusts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_result(path: Path) -> dict | None:
    """A saved result, or None when it is missing or unreadable (then the problem is redone)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "outcome" in data else None


def is_finished(out: Path, task: Task) -> bool:
    """Resume skips a problem only when its saved result was judged against the same candidate."""
    saved = read_result(results_path(out, task.key))
    if saved is None or saved.get("outcome") == NOT_RUN:  # built without a GPU, never run: no verdict to keep
        return False
    bench = saved.get("bench") or {}
    if bench.get("candidate_sha") and task.candidate is not None:
        # NOTE: the same file by content: a changed compiler (or an edited candidate) is judged again.
        from torchweld.bench.prewarm import file_sha

        if not task.candidate.is_file() or file_sha(task.candidate) != bench["candidate_sha"]:
            return False
    return _same_candidate(bench.get("candidate"), task.candidate, out) and bench.get(
        "compiled", False
    ) == task.compile


def _same_candidate(saved: str | None, candidate: Path | None, out: Path) -> bool:
    """Equal paths, or the same file under RESULTS_DIR/candidates (results carried to another checkout)."""
    if saved is None or candidate is None:
        return saved is None and candidate is None
    if saved == str(candidate):
        return True
    marker = f"{out.name}/candidates/"
    return marker in saved and marker in str(candidate) and saved.split(marker)[-1] == str(candidate).split(marker)[-1]


def load_results(out: Path) -> list[dict]:
    """Every readable result under `out/results/`, sorted by category then name."""
    folder = out / "results"
    results = [r for p in sorted(folder.glob("*.json")) if (r := read_result(p)) is not None] if folder.is_dir() else []
    return sorted(results, key=lambda r: (str(r.get("category", "")), str(r.get("name", ""))))


def _within(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent)
        return True
    except ValueError:
        return False
