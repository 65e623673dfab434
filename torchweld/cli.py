"""The `torchweld` command: compile, explain, check, bench, agent."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchweld import __version__
from torchweld.options import Options, Precision
from torchweld.problem import ProblemError


COMPILE_EXITS = """exit codes:
  0   the file was written (and, on a GPU, built, correct on the first check and timed)
  2   the problem file is unusable, or -o names the problem file itself
  3   the compiler could not handle the model: the file written runs the original forward
  12  on a GPU: the first check found the file wrong or failing (its report says how)"""


def _compile(args) -> int:
    from torchweld.pipeline import compile_problem, cuda_available, passthrough
    from torchweld.problem import load_problem

    problem = load_problem(args.problem)
    out = output_path(problem.path, problem.name, args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    options = _options(args)
    try:
        result = compile_problem(problem, options)
    except ProblemError:
        raise
    except Exception as e:  # still write a correct file: the original forward
        source, reason = passthrough(problem, e)
        out.write_text(source)
        print(f"torchweld: could not compile {problem.path}: {reason}", file=sys.stderr)
        print(f"wrote {out}: nothing fused, its ModelNew runs the original forward (correct, not faster)")
        return 3
    out.write_text(result.source)
    fused = sum(len(k.nodes) for k in result.plan.kernels)
    print(f"wrote {out}: {len(result.plan.kernels)} fused kernel(s), {fused} ops fused")
    if not cuda_available():
        print("no CUDA GPU here: the file was written but not built, checked or timed "
              "(run `torchweld check PROBLEM OUT` on a GPU machine)")
        return 0
    from torchweld.judge.first import first_check

    report = first_check(problem, out, trials=3, tf32=options.tf32)
    print(report.text())
    return 0 if report.ok else 12


def output_path(problem: Path, name: str, output: str | None) -> Path:
    """Where `compile` writes: `-o FILE`, `-o DIR` (`DIR/<name>_new.py`), or `out/<name>_new.py`.

    Raises ProblemError where that is the problem file itself (it would be overwritten)."""
    out = Path(output) if output else Path("out")
    if out.is_dir() or not output or output.endswith(("/", "\\")):
        out = out / f"{name}_new.py"
    if out.resolve() == Path(problem).resolve():
        raise ProblemError(f"-o {output} is the problem file itself: writing ModelNew there would overwrite it")
    return out


def _options(args, dump: bool = False) -> Options:
    """The Options the command line asks for."""
    return Options(dump=dump, precision=args.precision, layout_plan=not args.no_layout_plan, cuda_graph=args.cuda_graph,
                   gemm=args.gemm, conv_ours=args.conv_ours)


def _explain(args) -> int:
    from torchweld.pipeline import compile_problem
    from torchweld.plan.describe import decisions, listing
    from torchweld.problem import load_problem

    result = compile_problem(load_problem(args.problem), _options(args, dump=True))
    print("# Captured graph (aten ops as the IR)\n")
    print(result.captured)
    print("\n# Rewrites\n")
    print("\n".join(result.simplified.log) or "(none)")
    if args.passes:
        for name, g in result.dumps[1:]:
            print(f"\n# After {name}\n\n{g}")
    print("\n# Simplified graph\n")
    print(result.simplified)
    print("\n# Kernel plan\n")
    print(listing(result.plan))
    print("\n# Decisions\n")
    print(decisions(result.plan))
    return 0


def _add_options(p: argparse.ArgumentParser) -> None:
    """The compiler's options, for `compile` and `explain` alike."""
    p.add_argument("--precision", choices=[str(x) for x in Precision], default=str(Precision.FP32),
                   help="fp32 (default): fp32 math wherever the reference has it; tf32: cuBLAS and cuDNN may use "
                        "TF32 matrix units for fp32 data (faster; the file's header says so)")
    p.add_argument("--no-layout-plan", action="store_true",
                   help="run convolutions as the original does instead of in the layout measured fastest")
    p.add_argument("--cuda-graph", action="store_true",
                   help="replay the fast path as a CUDA graph (one launch; for forwards that launch many small "
                        "kernels; its terms are written in the file's header)")
    p.add_argument("--gemm", action="store_true",
                   help="run GEMMs in our own kernel with the pointwise work after them fused in, checked against "
                        "the library's and timed at the first call (unverified on a GPU)")
    p.add_argument("--conv-ours", action="store_true",
                   help="run convolutions in our own implicit-GEMM kernel with the pointwise work after them fused in, "
                        "checked against cuDNN's (both layouts) and timed at the first call (unverified on a GPU)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchweld", description=__doc__)
    p.add_argument("--version", action="version", version=f"torchweld {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    compile_cmd = sub.add_parser("compile", help="write a standalone ModelNew file for a problem",
                                 description="Write a standalone ModelNew file for PROBLEM; on a machine with a CUDA "
                                             "GPU, also build it, check it on 3 fresh inputs and time it.",
                                 epilog=COMPILE_EXITS, formatter_class=argparse.RawDescriptionHelpFormatter)
    compile_cmd.add_argument("problem", help="problem file defining Model, get_inputs, get_init_inputs")
    compile_cmd.add_argument("-o", "--output", metavar="PATH",
                             help="the ModelNew file to write, or a directory to write <name>_new.py into "
                                  "(default out/<name>_new.py); never the problem file itself")
    _add_options(compile_cmd)
    compile_cmd.set_defaults(func=_compile)
    explain_cmd = sub.add_parser("explain",
                                 help="show the captured graph, the rewrites, the kernel plan and its decisions")
    explain_cmd.add_argument("problem", help="problem file defining Model, get_inputs, get_init_inputs")
    explain_cmd.add_argument("--passes", action="store_true", help="print the graph after every pass")
    _add_options(explain_cmd)
    explain_cmd.set_defaults(func=_explain)
    for module in ("torchweld.judge.check_cli", "torchweld.bench.runner", "torchweld.agent.agent_cli"):
        try:
            __import__(module, fromlist=["register"]).register(sub)
        except ImportError as err:  # a part not installed in this checkout
            print(f"torchweld: {module} unavailable: {err}", file=sys.stderr)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ProblemError as e:
        print(f"torchweld: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # compiler errors: one line, not a traceback
        from torchweld.capture import CaptureError
        from torchweld.emit import EmitError

        if isinstance(e, (CaptureError, EmitError, NotImplementedError)):
            print(f"torchweld: cannot compile {getattr(args, 'problem', '')}: {e}", file=sys.stderr)
            return 3
        raise


if __name__ == "__main__":
    raise SystemExit(main())
