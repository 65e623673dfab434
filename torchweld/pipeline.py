"""The pipeline, top to bottom: capture -> simplify -> plan -> codegen -> emit (build and verify follow)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from torchweld.capture import capture
from torchweld.codegen.conv_kernel import check as conv_check
from torchweld.codegen.gemm_kernel import check as gemm_check
from torchweld.emit import emit, emit_passthrough
from torchweld.ir import Dim, Graph, Plan
from torchweld.options import Options, Precision  # noqa: F401  (callers take Options from here too)
from torchweld.plan import plan
from torchweld.plan.batch import runtime_batch, sized_view, specialised
from torchweld.problem import Problem, ProblemError, load_problem
from torchweld.simplify import simplify


@dataclass
class Result:
    """What each stage produced, for `explain`, tests and the CLI."""

    problem: Problem
    captured: Graph
    simplified: Graph
    plan: Plan
    source: str
    dumps: list[tuple[str, Graph]] = field(default_factory=list)


def _fake_inputs(problem: Problem) -> list:
    """Inputs as the problem makes them; only their shapes and dtypes are used by capture."""
    return problem.inputs()


def compile_problem(problem: Problem, options: Options = Options()) -> Result:
    model = problem.build_model(options.seed)
    inputs = _fake_inputs(problem)
    captured = capture(model, inputs, filename=str(problem.path))
    dumps: list[tuple[str, Graph]] = [("capture", captured)]
    simplified = simplify(captured, dump=(lambda name, g: dumps.append((name, g))) if options.dump else None)
    planned = batch_checked(model, inputs, simplified, plan(simplified, options, gemm_check, conv_check))
    source = emit(planned, problem.source, problem.name, options, problem.init_inputs())
    return Result(problem, captured, simplified, planned, source, dumps)


def batch_checked(model, inputs: list, simplified: Graph, planned: Plan) -> Plan:
    """`planned`, its runtime batch (and sequence length) kept only where the model traced at another batch
    (sequence length) gives the same graph: a constant forward derives from the batch (`x / x.size(0)`,
    `torch.arange(x.size(1))`) is baked into the kernels."""
    if planned.guard.seq and not _same_at(model, inputs, simplified, planned, 1):
        planned = runtime_batch(specialised(planned, simplified), seq=False)
    if planned.guard.batch and not _same_at(model, inputs, simplified, planned, 0):
        return specialised(planned, simplified)
    return planned


def _same_at(model, inputs: list, simplified: Graph, planned: Plan, dim: int) -> bool:
    """Whether the model traced with dim `dim` of every tensor input one longer than captured gives the graph
    `planned` was made from, its runtime sizes aside."""
    size = planned.guard.seq + 1 if dim else planned.guard.batch[0] + 1
    # runtime_batch's views: how many outer dims each takes at run time
    views = {n.name: 1 + any(isinstance(a, Dim) for a in n.args[1]) for n in planned.graph.nodes
             if sized_view(n) and n.args[1][0] == -1}
    # NOTE: inputs expanded from one sample first (no copy); where that traces otherwise (a view merging the
    # batch with another dim cannot be a view of an expanded input), one sample more than captured, contiguous
    # tensors made at the runtime size (`zeros(layers, B, H)`): (argument, position) of each such size
    made = {n.name: [(i, j) for i, a in enumerate(n.args) if isinstance(a, list)
                     for j, x in enumerate(a) if isinstance(x, Dim) and x.dim == dim]
            for n in planned.graph.nodes if n.name not in views}
    made = {k: v for k, v in made.items() if v}
    for make in (lambda x: x.narrow(dim, 0, 1).expand(*[size if i == dim else -1 for i in range(x.dim())]),
                 lambda x: torch.cat([x, x.narrow(dim, 0, 1)], dim)):
        try:
            graph = simplify(capture(model, [make(x) if isinstance(x, torch.Tensor) else x for x in inputs]))
        except Exception:  # another size does not even trace: it stays specialised
            continue
        if _key(simplified, views, made, size - 1) == _key(graph, views, made, size):
            return True
    return False


def _key(graph: Graph, views: dict[str, int], made: dict, size: int) -> list:
    """What must not change with the batch: each node, the runtime sizes in `views` (`view(b, -1)`) aside, and
    those of the tensors `made` at the runtime size, where they are `size` (they must follow it)."""
    def args(n):
        out = [list(a) if isinstance(a, (list, tuple)) else a for a in n.args]
        for i, j in made.get(n.name, ()):
            if isinstance(out[i], list) and j < len(out[i]) and out[i][j] == size:
                out[i][j] = "runtime"
        return out

    return [(n.name, n.op, n.target, (n.args[0], n.shape[views[n.name]:]) if n.name in views else args(n), n.attrs)
            for n in graph.nodes]


def compile_source(problem: Problem, options: Options = Options()) -> tuple[str, str | None]:
    """(ModelNew source, None), or a passthrough ModelNew and the reason when the compiler fails.

    NOTE: a model the compiler cannot handle still gets a correct file (its original forward);
    a bad problem file (ProblemError) is the user's to fix and is raised.
    """
    try:
        return compile_problem(problem, options).source, None
    except ProblemError:
        raise
    except Exception as e:  # any compiler failure: capture, an unsupported op, a bug of ours
        return passthrough(problem, e)


def passthrough(problem: Problem, error: Exception) -> tuple[str, str]:
    """The original-forward ModelNew for a model the compiler failed on, and the one-line reason."""
    text = str(error).strip()
    reason = f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
    return emit_passthrough(problem.source, problem.name, reason), reason


def compile_file(problem_path, out_path=None, options: Options = Options()) -> Path:
    """Compile a problem file and write the ModelNew file (default: `<stem>_new.py` beside it)."""
    problem = load_problem(problem_path)
    source, _ = compile_source(problem, options)
    out = Path(out_path) if out_path else problem.path.with_name(problem.path.stem + "_new.py")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(source)
    return out


def cuda_available() -> bool:
    return torch.cuda.is_available()
