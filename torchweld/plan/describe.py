"""The plan as Python, for `explain`: library calls as they are, each kernel as one call, then every
decision the Plan records on how they run."""
from __future__ import annotations

from torchweld.ir import CONVOLUTION, LIBRARY, Plan, format_node
from torchweld.plan.conv_ours import describe_site as describe_conv
from torchweld.plan.gemm_ours import describe_site
from torchweld.plan.gemm_sites import describe_decision


def describe(plan: Plan) -> str:
    """The plan's forward (`listing`), then its decisions (`decisions`)."""
    return listing(plan) + "\n\n" + decisions(plan)


def listing(plan: Plan) -> str:
    """The plan as Python: library calls as they are, each kernel as one call, ops underneath."""
    nodes = plan.graph.by_name()
    lines = ["def forward(...):"]
    for step in plan.steps:
        k = plan.kernel(step)
        if k is None:
            n = nodes[step]
            if n.op in ("input", "param"):
                continue
            note = "  [library]" if n.target in LIBRARY else ""
            lines.append("    " + format_node(n) + note)
            continue
        shape = "x".join(map(str, k.shape))
        lines.append(f"    {', '.join(k.outputs)} = {k.name}({', '.join(k.inputs)})"
                     f"  # fused: {len(k.nodes)} ops over {shape}")
        for m in k.nodes:
            lines.append("        # " + format_node(nodes[m]).split("  #")[0])
    outs = ", ".join(plan.graph.outputs)
    lines.append(f"    return {outs}")
    return "\n".join(lines)


def decisions(plan: Plan) -> str:
    """Every decision the plan records, one titled part each ("none" where it made none)."""
    nodes = plan.graph.by_name()

    def param(name: str) -> str:
        return f"{name} ({nodes[name].target})" if nodes[name].op == "param" else name

    convs = [n.name for n in plan.graph.nodes if n.op == "aten" and n.target == CONVOLUTION]
    sites = [f"{c}: site {i}; its output is handed on " + (
        "as made (channels-last where that ran fastest: its readers take either)" if fmt is None else
        "contiguous, as captured" if fmt == "contiguous_format" else f"{fmt}, as captured")
        for i, (c, fmt) in enumerate(plan.conv_sites.items())]
    channels_last = [f"{k.name}: " + ", ".join(f"{a} with strides {s}" for a, s in plan.layouts.of(k).items())
                     for k in plan.kernels if plan.layouts is not None and plan.layouts.of(k)]
    copy_into = [f"{_maker(plan, o)} writes {o} into {param(dst)}; the copy_ {copy} moves nothing"
                 for o, (copy, dst) in plan.written_into.items()]
    guard = [f"dtype and device: {', '.join(param(p) for p in plan.guard.params)}"] * bool(plan.guard.params)
    guard += [f"shape: {param(p)} (a depthwise kernel is built for it)" for p in plan.guard.shapes]
    guard += [f"mode: {m or 'the model'} in {'training' if t else 'eval'} mode" for m, t in plan.guard.modes]
    guard += [f"batch: dim 0 of every input, a runtime size from 1 to {plan.guard.batch[1]:,} (captured "
              f"{plan.guard.batch[0]}; plan/batch.py); the other dims as captured"] if plan.guard.batch and not plan.guard.seq else []
    guard += [f"batch and sequence: dims 0 and 1 of every input, runtime sizes whose product is from 1 to "
              f"{plan.guard.batch[1]:,} (captured {plan.guard.batch[0]} and {plan.guard.seq}; plan/batch.py); the "
              "other dims as captured"] if plan.guard.seq else []
    guard += [f"grad mode: with it on, none of the inputs, {', '.join(param(p) for p in plan.guard.grads)} requires grad"
              if plan.guard.grads else "grad mode: with it on, no input requires grad"]
    parts = [  # (what, how it runs, entries, what to say where there are none)
        ("Convolution sites", "`_tw_conv` runs each in NCHW or channels-last, cuDNN's heuristic or benchmarked "
         "algorithm, whichever is measured fastest at its first call", sites,
         "none" + (" (layout planning is off: convolutions run as the original does)" if convs else "")),
        ("Channels-last builds", "a second build, `_cl`, reads these operands as a channels-last convolution made them",
         channels_last, "none"),
        ("GEMM sites", "`_tw_lt` times each way offered besides ours at the first call on each device",
         [f"{k}: {describe_decision(decision)}" for k, decision in plan.gemm_sites.items()], "none"),
        *([("Our GEMM", "--gemm; unverified on a GPU: each site is checked against and timed beside the "
            "library's at its first call on each device", [describe_site(g, s) for g, s in plan.gemm_ours.items()],
            "none")] if plan.gemm_ours else []),
        *([("Our convolution", "--conv-ours; unverified on a GPU: each site is checked against cuDNN's and timed beside "
            "cuDNN in both layouts at its first call on each device", [describe_conv(c, s) for c, s in plan.conv_ours.items()],
            "none")] if plan.conv_ours else []),
        ("Packed weights", "`_tw_pack` lays the weight out (in, out) once per version; cuBLAS runs the GEMM's NN form",
         [f"{t} = {p}.t() ({nodes[p].target}), laid out (in, out)" for t, p in plan.packed_weights.items()], "none"),
        ("Written over an operand", "read by the kernel alone, each element before it is written",
         [f"{_maker(plan, o)} writes {o} over {a}" for o, a in plan.written_over.items()], "none"),
        ("Written into a parameter or buffer", "the kernel writes it there itself", copy_into, "none"),
        ("Views never made", "the kernels read the tensor itself",
         [f"{v} = a view of {param(src)}" for v, src in plan.elided_views.items()], "none"),
        ("Made once", "`_tw_held` makes what forward builds from constants and parameters alone once per device "
         "and parameter version", [f"{h} = {nodes[h].target or nodes[h].op}" for h in plan.held], "none"),
        ("Guard", "besides the inputs' shapes, dtypes and devices; a failing check runs the original forward",
         guard, "the inputs alone"),
    ]
    lines = []
    for what, how, entries, none in parts:
        lines += [f"{what} ({how}):", *(f"  {e}" for e in entries)] if entries else [f"{what}: {none}"]
    if plan.cuda_graph:
        lines.append("CUDA graph: the fast path is captured at its first call and replayed")
    elif plan.graph_blockers:
        lines.append("CUDA graph: cannot be used: " + "; ".join(plan.graph_blockers))
    else:
        lines.append("CUDA graph: not asked for (--cuda-graph); nothing blocks it")
    return "\n".join(lines)


def _maker(plan: Plan, value: str) -> str:
    """The kernel that makes `value`."""
    return next(k.name for k in plan.kernels if value in k.outputs)
