"""The standalone ModelNew file (needs PyTorch alone: no torchweld import at run time), printed from the Plan."""
from __future__ import annotations

import ast

from torchweld.codegen import module_source, reduce_launch, variant_name
from torchweld.emit.forward import forward
from torchweld.codegen.conv_kernel import built as conv_built
from torchweld.emit.conv_wrapper import site_of as conv_site_of
from torchweld.emit.gemm_ways import gemm_ways_function
from torchweld.emit.gemm_wrapper import gemm_build, site_of
from torchweld.codegen.gemm_kernel import built
from torchweld.emit.header import header
from torchweld.emit.repeats import repeats
from torchweld.emit.runtime import pasted
from torchweld.emit.source import EmitError, init_check, init_method, method_source, methods, source_parts
from torchweld.emit.wrappers import wrapper
from torchweld.ir import Plan
from torchweld.options import Options, Precision
from torchweld.simplify.conv_fold import FOLD

IMPORTS = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]


def emit(plan: Plan, source: str, problem_name: str, options: Options = Options(),
         init_args: list | None = None, config: str | None = None) -> str:
    """The ModelNew file for `plan` (made by plan.plan with `options`), keeping the problem's
    constructor and forward signature.

    `options.precision`: the header says which; under TF32 the fast path runs with TF32 allowed in
    cuBLAS and cuDNN. `init_args`: the constructor arguments the graph was captured with (a ModelNew
    built with others runs the original forward). `config`: where there are no `init_args`, the
    captured module's `_tw_config` (runtime/config.py): a ModelNew of another runs the original forward."""
    keep, model, lines = source_parts(source)
    model_methods = methods(model)
    fwd = model_methods["forward"]
    if fwd.args.vararg or fwd.args.kwarg:  # the guard names each input: *args would leave them unbound
        raise EmitError("forward takes *args or **kwargs: not supported")
    graph = plan.graph
    same = repeats(plan)  # NOTE: a kernel repeating another's code is printed once, and called for each
    kernels = [k for k in plan.kernels if k.name not in same]
    cuda = module_source(kernels, graph, plan.layouts, plan.gemm_ours, plan.conv_ours)
    out = [header(plan, problem_name, options, same), "import ctypes", "import hashlib", "import inspect", "", *IMPORTS]
    out += [s for s in keep if s.strip() and s.strip() not in out]
    n_ptrs = {k.name: len(k.inputs) + len(k.outputs) + (k.kind == "reduce" and reduce_launch(k, graph).workspace > 0)
              + (k.batch > 0) for k in kernels}  # NOTE: a runtime batch's element count goes as one more
    n_ptrs.update({variant_name(k): n_ptrs[k.name] for k in kernels if plan.layouts.of(k)})
    ours = [k for k in plan.kernels if k.kind == "gemm"]
    n_ptrs.update({k.name: len(built(site_of(k, plan), graph).args) for k in ours})
    convs = [k for k in plan.kernels if k.kind == "conv"]
    n_ptrs.update({k.name: len(conv_built(conv_site_of(k, plan), graph).args) for k in convs})
    out += ["", f'_CUDA_SRC = r"""\n{cuda}"""', f"_KERNEL_ARGS = {n_ptrs!r}", ""]
    # NOTE: before the build, which reads `_tw_gemm_flags` (sm_90a for our GEMM's and convolution's
    # Hopper loops; files without either stay as they were)
    if ours or convs:
        out += [pasted("site_timing"), "", pasted("gemm_select"), "", gemm_build(pasted("extension")), ""]
    else:
        out += [pasted("extension"), ""]
    timed = plan.timed_gemm_sites
    runtime = [("site_timing", (plan.conv_sites or timed) and not (ours or convs)), ("conv_run", plan.conv_sites),
               ("conv_select", convs),
               ("gemm_way_pick", timed), ("fold", any(n.op == FOLD for n in graph.nodes)), ("pack", plan.packed_weights),
               ("tf32", options.precision is Precision.TF32), ("graph", plan.cuda_graph),
               ("shape_note", any(n.op == "input" and n.attr("value") is None for n in graph.nodes))]
    for name, needed in runtime:
        if needed:
            out += ["", pasted(name), ""]
    out += [wrapper(k, plan) + "\n\n" for k in kernels]
    out += [gemm_ways_function(site, plan.kernel(name), plan) + "\n\n" for name, site in timed.items()
            if name not in same]
    same_init = init_check(model_methods.get("__init__"), init_args)
    if not same_init and config is not None and "__init__" in model_methods:
        same_init = f"self._tw_same_init = _tw_config(self) == {config!r}"
        out += [pasted("config") + "\n\n"]
    out.append(f"class ModelNew({_bases(model)}):")
    doc = ast.get_docstring(model)
    if doc:
        out.append('    """' + doc.replace("\\", "\\\\") + '"""')  # NOTE: a raw docstring's backslashes, escaped
    for name, f in model_methods.items():
        if name == "__init__" and same_init:
            out.append(init_method(lines, f, same_init))
        elif name != "forward":
            out.append(method_source(lines, f) + "\n")
    inputs = [n for n in graph.nodes if n.op == "input"]
    out += forward(plan, inputs, ast.unparse(fwd.args), options, bool(same_init), same)
    out.append("")
    out.append("    # The original forward, for inputs the kernels were not built for.")
    out.append(method_source(lines, fwd, "_tw_general"))
    return "\n".join(out) + "\n"


def emit_passthrough(source: str, problem_name: str, reason: str) -> str:
    """A ModelNew that runs the original forward: what we write when the compiler cannot help.

    Always correct, and slower than eager by no more than a method call; the header says why.
    """
    keep, model, lines = source_parts(source)
    model_methods = methods(model)
    why = " ".join(reason.split())[:300].replace('"', "'").replace("\\", "/")
    out = ['"""torchweld: ModelNew for ' + problem_name + ".", "",
           "Nothing fused: the compiler could not handle this model, so forward is the original code.",
           f"Reason: {why}", '"""', *IMPORTS]
    out += [s for s in keep if s.strip() and s.strip() not in out]
    out += ["", "", f"class ModelNew({_bases(model)}):"]
    doc = ast.get_docstring(model)
    if doc:
        out.append('    """' + doc.replace("\\", "\\\\") + '"""')  # NOTE: a raw docstring's backslashes, escaped
    out += [method_source(lines, f) + "\n" for f in model_methods.values()]
    return "\n".join(out).rstrip() + "\n"


def _bases(model: ast.ClassDef) -> str:
    """Model's base classes as written (a problem's is nn.Module; a module given to torchweld.compile may
    derive from another, whose methods ModelNew needs too)."""
    return ", ".join(ast.unparse(b) for b in model.bases) or "nn.Module"
