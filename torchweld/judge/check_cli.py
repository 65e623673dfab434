"""`torchweld check PROBLEM CANDIDATE`: grade a ModelNew; prints a table (or JSON) and returns the exit code."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from torchweld.judge.check_options import EXIT_CODES, USAGE_EXIT, CheckOptions
from torchweld.judge.tolerance import MODES


def register(subparsers) -> argparse.ArgumentParser:
    """Add the `check` subcommand to a parent parser's subparsers."""
    p = subparsers.add_parser("check", help="grade a candidate ModelNew against a problem",
                              description="Grade CANDIDATE (a .py file, or a .txt/.md reply holding a fenced python "
                                          "block that defines ModelNew) against PROBLEM. Exit codes: " +
                                          ", ".join(f"{k}={v}" for k, v in EXIT_CODES.items()) + ", usage error=2.",
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("problem", help="problem file defining Model, get_inputs, get_init_inputs")
    p.add_argument("candidate", help="candidate .py, or a reply (.txt/.md) holding one")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--timeout", type=float, default=CheckOptions.timeout_s, metavar="S", help="time limit (s)")
    p.add_argument("--no-timing", action="store_true", help="skip timing")
    p.add_argument("--tolerance", choices=MODES, default=CheckOptions.tolerance,
                   help="oracle: float64 truth (default); table: per-dtype table; kernelbench: 1e-2 for all")
    p.add_argument("--trials", type=int, default=CheckOptions.trials, metavar="N", help="correctness input sets")
    p.add_argument("--compile-mode", choices=("default", "max-autotune"), default=CheckOptions.compile_mode)
    p.add_argument("--build-only", action="store_true",
                   help="only what needs no GPU: extract, scan, import with the extension builds recorded, compile "
                        "them as load_inline would; run nothing (outcome no_build or no_gpu). Without a GPU the "
                        "judge does only this")
    p.add_argument("--require-kernel", action="store_true",
                   help="the problem asks for custom kernels: an answer that defines no CUDA/Triton kernel of its "
                        "own is no_kernel")
    p.set_defaults(func=run)
    return p


def options_from(args) -> CheckOptions:
    return CheckOptions(timeout_s=args.timeout, timing=not args.no_timing, tolerance=args.tolerance,
                        trials=args.trials, compile_mode=args.compile_mode, build_only=args.build_only,
                        require_kernel=args.require_kernel)


def run(args) -> int:
    """Run the judge for parsed `args`; print the result; return the exit code (never raises on bad input)."""
    from torchweld.judge.parent import check, gpu_present
    from torchweld.judge.render import render
    from torchweld.problem import ProblemError

    if args.trials < 1 or args.timeout <= 0:
        print("torchweld check: --trials and --timeout must be positive", file=sys.stderr)
        return USAGE_EXIT
    for path in (args.problem, args.candidate):
        if not Path(path).is_file():
            print(f"torchweld check: {path}: no such file", file=sys.stderr)
            return USAGE_EXIT
    if args.build_only or not gpu_present():
        why = "--build-only" if args.build_only else "no GPU here"
        print(f"torchweld check: {why}: the candidate is checked and built, not run (outcome no_gpu if it builds)",
              file=sys.stderr, flush=True)
    try:
        result = check(args.problem, args.candidate, options_from(args))
    except (ProblemError, FileNotFoundError) as e:
        print(f"torchweld check: {e}", file=sys.stderr)
        return USAGE_EXIT
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(render(result, color=sys.stdout.isatty()), end="")
    return EXIT_CODES.get(result["outcome"], EXIT_CODES["runtime_error"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="torchweld")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
