"""`torchweld bench DIR`: judge every problem under DIR on all GPUs, resumably, then write the reports."""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from rich.console import Console

from torchweld.bench.tasks import duplicate_keys, find_problems, is_finished, load_results, plan_tasks
from torchweld.bench.gpu_pool import WorkerStartupError, run_inline, run_pool
from torchweld.bench.prewarm import compiler_fingerprint
from torchweld.bench.progress import Display
from torchweld.bench.report import rerender, write_reports
from torchweld.bench.worker import Job

USAGE_ERROR = 2
INTERRUPTED = 130


@dataclass(frozen=True)
class BenchOptions:
    """Everything one bench run needs, resolved from the command line."""

    problems: Path
    out: Path
    candidates: Path | None = None
    compile: bool = False
    gpus: int | None = None  # None: every visible GPU (1 worker when there are none)
    resume: bool = True
    timeout: float | None = None  # None: the judge's default
    filter: str | None = None
    command: str = ""
    prewarm: int = 0  # processes that build candidates and torch.compile caches before judging
    per_gpu: int = 1  # judges sharing each GPU (>1: they take turns on it through a lock)
    judge: tuple = ()  # (name, value) overrides of the judge's CheckOptions, from --set


def register(subparsers) -> None:
    """Add `torchweld bench` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "bench", help="judge a directory of problems on all GPUs and write reports",
        description="Judge every problem under DIR (against --candidates or freshly --compile'd ModelNews), one "
        "worker per GPU, saving each result as it finishes; then write results.json, summary.md, report.html "
        "and speedups.png. Reruns resume where the last run stopped.",
    )
    p.add_argument("dir", nargs="?", type=Path, metavar="DIR", help="directory of problem files (searched recursively)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--candidates", type=Path, metavar="DIR",
                        help="ModelNew files: DIR/<same relative path> or DIR/<stem>, as .py, .md or .txt")
    source.add_argument("--compile", action="store_true", help="compile each problem with torchweld first")
    p.add_argument("--gpus", type=int, metavar="N", help="worker processes, one per GPU (default: all visible)")
    p.add_argument("--out", type=Path, metavar="RESULTS_DIR", help="where results go (default: out/bench/<DIR name>)")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="skip problems already judged in RESULTS_DIR (default: on)")
    p.add_argument("--timeout", type=float, metavar="S", help="the judge's per-run timeout in seconds")
    p.add_argument("--filter", metavar="GLOB", help="only problems whose relative path or stem matches GLOB")
    p.add_argument("--prewarm", type=int, default=0, metavar="N",
                   help="first build candidates and torch.compile caches in N parallel processes (cold times "
                        "are kept and reported; the judged compile times are then warm-cache times)")
    p.add_argument("--per-gpu", type=int, default=1, metavar="K",
                   help="judges per GPU (default 1). With K > 1 they overlap what needs only the CPU (start-up, "
                        "building, torch.compile) and take turns, through a lock, for everything that runs on the "
                        "GPU: correctness, generalisation and timing never overlap")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override one of the judge's options, e.g. --set timing_min_s=0.5 --set max_variants=6")
    p.add_argument("--report-only", type=Path, metavar="RESULTS_DIR",
                   help="re-render the reports from saved results and exit (no GPU needed)")
    p.set_defaults(func=run)


def run(args, console: Console | None = None) -> int:
    """The `bench` subcommand: 0 when the run completed (failing problems included), 2 on usage errors."""
    console = console or Console()
    if getattr(args, "report_only", None) is not None:
        return report_only(args.report_only, console)
    problem = _usage_problem(args)
    if problem:
        _say(console, f"torchweld bench: {problem}")
        return USAGE_ERROR
    opts = BenchOptions(
        problems=args.dir, out=args.out or Path("out") / "bench" / args.dir.resolve().name,
        candidates=args.candidates, compile=bool(args.compile), gpus=args.gpus, resume=args.resume,
        timeout=args.timeout, filter=args.filter, command=shlex.join(["torchweld", *sys.argv[1:]]),
        prewarm=args.prewarm, per_gpu=args.per_gpu, judge=tuple(parse_settings(args.set)),
    )
    return run_bench(opts, console=console)


def run_bench(opts: BenchOptions, check: Callable | None = None, compile_fn: Callable | None = None,
              console: Console | None = None, spawn: bool = True, devices: list[str] | None = None) -> int:
    """Plan, judge what is left, and render; `check`, `compile_fn`, `spawn`, `devices` exist for tests."""
    console = console or Console()
    out = opts.out.resolve()
    exclude = (out,) + ((opts.candidates,) if opts.candidates else ())
    problems = find_problems(opts.problems, exclude=exclude, pattern=opts.filter)
    if not problems:
        where = f" matching {opts.filter!r}" if opts.filter else ""
        _say(console, f"torchweld bench: no problem files (defining class Model) under {opts.problems}{where}")
        return USAGE_ERROR
    tasks = plan_tasks(opts.problems, problems, opts.candidates, out / "candidates" if opts.compile else None)
    dups = duplicate_keys(tasks)
    if dups:
        _say(console, f"torchweld bench: problems would share result names: {', '.join(dups)}")
        return USAGE_ERROR
    slots = gpu_slots(opts.gpus, devices)
    if isinstance(slots, str) or opts.per_gpu < 1:
        _say(console, f"torchweld bench: {slots if isinstance(slots, str) else '--per-gpu must be at least 1'}")
        return USAGE_ERROR
    slots = [s for s in slots for _ in range(opts.per_gpu)]
    gpus = any(s is not None for s in slots)
    if not gpus:
        _say(console, "torchweld bench: no GPU here: candidates are checked and built, not run; their results "
                      "(no_gpu) are no verdicts, and a run on a GPU judges them again")
    if opts.compile and spawn and compile_fn is None:
        from torchweld.bench.prewarm import compile_candidates

        compile_candidates(tasks, out, opts.prewarm or max(1, (os.cpu_count() or 2) // 2),
                           say=lambda text: _say(console, text))
    todo = [t for t in tasks if not (opts.resume and is_finished(out, t))]
    resumed = len(tasks) - len(todo)
    meta = run_meta(opts, out, slots, resumed)
    job = Job(out=out, timeout=opts.timeout, check=check, compile_fn=compile_fn, judge=opts.judge,
              gpu_lock=opts.per_gpu > 1, quiet=len(slots) > 1)
    _say(console, f"torchweld bench: {len(tasks)} problems, {len(todo)} to judge ({resumed} resumed), "
                  f"{len(slots)} worker(s); results in {out}")
    interrupted = False
    if opts.prewarm and todo and spawn and gpus:  # prewarm runs torch.compile on the GPU
        from torchweld.bench.prewarm import prewarm

        prewarm(todo, out, opts.prewarm, slots[0], say=lambda text: _say(console, text))
    try:
        with Display(console, len(todo), slots, resumed) as display:
            if not spawn:
                run_inline(todo, job, display.hooks())
            elif todo:
                run_pool(todo, job, slots, display.hooks(), hard_limit(opts.timeout))
    except KeyboardInterrupt:
        interrupted = True
        _say(console, "interrupted: finished problems are saved; rerun the same command to resume")
    except WorkerStartupError as e:
        _say(console, f"torchweld bench: {e}")
        return 1
    written = write_reports(out, load_results(out), dict(meta, interrupted=interrupted))
    _print_written(console, written)
    return INTERRUPTED if interrupted else 0


def parse_settings(items: list[str]) -> list[tuple[str, object]]:
    """`NAME=VALUE` pairs with VALUE read as a number or boolean where it looks like one."""
    out = []
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"torchweld bench: --set wants NAME=VALUE, got {item!r}")
        value: object = text
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    continue
        out.append((name.strip(), value))
    return out


def report_only(out: Path, console: Console) -> int:
    if not (out / "results").is_dir() and not (out / "results.json").is_file():
        _say(console, f"torchweld bench: no saved results in {out} (expected results/ or results.json)")
        return USAGE_ERROR
    _print_written(console, rerender(out))
    return 0


def gpu_slots(requested: int | None, devices: list[str] | None = None) -> list[str | None] | str:
    """One CUDA_VISIBLE_DEVICES value per worker (None: no GPUs, workers unpinned); a str is a usage error."""
    devices = visible_devices() if devices is None else devices
    if requested is not None and requested < 1:
        return f"--gpus must be at least 1, not {requested}"
    if not devices:
        return [None] * (requested or 1)
    if requested is not None and requested > len(devices):
        return f"--gpus {requested} but only {len(devices)} GPU(s) are visible"
    return list(devices[: requested or len(devices)])


def visible_devices() -> list[str]:
    """The GPUs this process may use, as the ids CUDA_VISIBLE_DEVICES would name them."""
    try:
        import torch

        count = torch.cuda.device_count()  # NVML-based where possible: no CUDA context in the parent
    except Exception:
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in env.split(",") if d.strip()] if env is not None else []
    return ids[:count] if env is not None else [str(i) for i in range(count)]


def hard_limit(timeout: float | None) -> float:
    """A last-resort per-problem wall limit. The judge bounds its whole run by `timeout` (600 s, its
    default, when unset); `--compile` adds compile time before that. This only catches a hang outside them."""
    return 2 * (timeout or 600.0) + 900.0


def run_meta(opts: BenchOptions, out: Path, slots: list, resumed: int) -> dict:
    return {
        "title": opts.problems.resolve().name,
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": None,  # taken from the results: the parent never initialises CUDA
        "torch": _torch_version(),
        "command": opts.command,
        "git": git_commit(),
        "torchweld": compiler_fingerprint(),  # a hash of the sources: `git` is stale in a copied tree
        "problems": str(opts.problems),
        "candidates": str(opts.candidates) if opts.candidates else "compiled by torchweld (--compile)",
        "results_dir": str(out),
        "workers": len(slots),
        "gpus": slots,
        "timeout": opts.timeout,
        "filter": opts.filter,
        "resumed": resumed,
        "prewarm": opts.prewarm,
        "per_gpu": opts.per_gpu,
        "judge_options": dict(opts.judge),
    }


def git_commit() -> str | None:
    """torchweld's own commit (`+dirty` with local changes), or None outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _usage_problem(args) -> str | None:
    if args.dir is None:
        return "give a problems DIR (or --report-only RESULTS_DIR)"
    if not args.dir.is_dir():
        return f"{args.dir}: no such directory"
    if args.candidates is None and not args.compile:
        return "give --candidates DIR (ModelNew files to judge) or --compile (compile each problem first)"
    if args.candidates is not None and not args.candidates.is_dir():
        return f"--candidates {args.candidates}: no such directory"
    if args.timeout is not None and args.timeout <= 0:
        return f"--timeout must be positive, not {args.timeout:g}"
    return None


def _torch_version() -> str | None:
    try:
        import torch

        return torch.__version__
    except ImportError:
        return None


def _print_written(console: Console, written) -> None:
    _say(console, written.headline)
    for note in written.notes:
        _say(console, f"note: {note}")
    files = [written.results_json, written.summary_md, written.report_html] + (
        [written.speedups_png] if written.speedups_png else [])
    _say(console, "wrote " + ", ".join(str(f) for f in files))


def _say(console: Console, text: str) -> None:
    """Plain text (paths and messages may hold [brackets]), never hard-wrapped, so logs stay greppable."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)
