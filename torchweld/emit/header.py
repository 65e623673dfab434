"""The emitted file's opening docstring: what was fused, what runs in a library, and how each site runs."""
from __future__ import annotations

from math import prod

from torchweld.codegen import reduce_traffic
from torchweld.ir import LIBRARY, VIEWS, Plan
from torchweld.options import Options, Precision
from torchweld.plan.conv_ours import describe_site as describe_conv
from torchweld.plan.gemm_ours import describe_site
from torchweld.plan.gemm_sites import describe_decision
from torchweld.simplify.conv_fold import fold_header

# Aten calls that move no data: left out of the header's list of what still runs in PyTorch.
METADATA_ONLY = frozenset(VIEWS) | {"aten.t.default", "aten.transpose.int", "aten.permute.default",
                                    "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim"}


def header(plan: Plan, problem_name: str, options: Options = Options(), repeats: dict[str, str] | None = None) -> str:
    """The file's docstring for `plan`, compiled with `options`."""
    graph = plan.graph
    nodes = graph.by_name()
    lib = [nodes[s] for s in plan.steps if s in nodes and nodes[s].op == "aten"]
    library = [n for n in lib if n.target in LIBRARY]
    other = [n for n in lib if n.target not in LIBRARY and n.target not in METADATA_ONLY and n.name not in plan.held]
    lines = [f"torchweld: ModelNew for {problem_name}.", "", *_kernel_lines(plan, repeats or {})]
    if library:
        lines.append("In libraries (cuDNN/cuBLAS through ATen: their main loops beat a hand-written one):")
        lines += [f"  {n.name} = {n.target}" for n in library]
    if plan.gemm_sites:
        lines.append("GEMM sites (`_tw_lt` times each way offered besides ours, the GEMM then its kernel, at the "
                     "first call on each device and power-of-two class of the GEMM's rows,")
        lines.append("and keeps the fastest where it is clearly faster than ours):")
        lines += [f"  {k}: {describe_decision(decision)}" for k, decision in plan.gemm_sites.items()]
    if plan.gemm_ours:
        lines.append("GEMMs with --gemm: our GEMM (unverified on a GPU): at a site's first call on each device `_tw_gemm` runs")
        lines.append("ours and the library's way on the same inputs, and keeps ours only where it matched and is faster:")
        lines += [f"  {describe_site(g, s)}" for g, s in plan.gemm_ours.items()]
    if plan.conv_ours:
        lines.append("Convolutions with --conv-ours: our implicit GEMM (unverified on a GPU): at a site's first call on each")
        lines.append("device `_tw_convk` checks ours against cuDNN on the same inputs, times ours and cuDNN in both layouts,")
        lines.append("and keeps the fastest (ours only where it matched):")
        lines += [f"  {describe_conv(c, s)}" for c, s in plan.conv_ours.items()]
    lines += fold_header(graph)
    if plan.packed_weights:
        lines.append("Packed weights (`_tw_pack`: cuBLAS runs the GEMM's NN form, faster than the TN form of a linear's")
        lines.append("W.t(); the copy is made once per version of the weight and costs its memory once more):")
        lines += [f"  {t} = {nodes[p].target}.t(), laid out (in, out)" for t, p in plan.packed_weights.items()]
    if plan.held:
        lines.append("Made once per device and parameter version (`_tw_held`), from constants and parameters alone:")
        lines.append(f"  {', '.join(plan.held)}")
    if other:
        lines.append("Still in PyTorch (not fused by this version; views, which move no data, not listed):")
        lines += [f"  {n.name} = {n.target}" for n in other]
    if options.precision is Precision.TF32:
        lines += ["", "Precision: tf32 (asked for): cuBLAS (cuBLASLt too) and cuDNN may use TF32 matrix units for fp32 data;",
                  "fused kernels compute in fp32 (fp16/bf16 data too)."]
    else:
        lines += ["", "Precision: fp32 stays fp32 (fp16/bf16 data computes in fp32); no TF32 is enabled here."]
    if plan.conv_sites:
        lines.append("Layout: each convolution runs in NCHW or channels-last, cuDNN's heuristic or benchmarked "
                     "algorithm, whichever was measured fastest at its first call (`_tw_conv`).")
        both = [k.name for k in plan.kernels if plan.layouts.of(k)]
        if both:
            lines.append(f"A channels-last result is read as made (no copy back to NCHW) by {', '.join(both)}: "
                         "each has a second build, `_cl`, for it.")
    if plan.cuda_graph:
        lines += ["CUDA graph (asked for): the fast path is captured at its first call and replayed: inputs are",
                  "copied into the captured buffers and the output is cloned (each call returns a new tensor).",
                  "Terms: parameters are read where they lived at capture (moving one, e.g. .to(), or changing",
                  "one in place, e.g. load_state_dict, captures again); no other stream may use the captured",
                  "buffers meanwhile."]
    elif options.cuda_graph and plan.graph_blockers:
        lines.append("CUDA graph: asked for but not used: " + "; ".join(plan.graph_blockers) + ".")
    lines += ["Inputs of other shapes, dtypes or devices run the original forward (`_tw_general`).",
              *_shape_lines(plan),
              "Training: the kernels register no backward, so where grad mode is on and an input or parameter requires",
              "grad, forward runs the original forward (autograd as eager); the kernels run under torch.no_grad(),",
              "torch.inference_mode(), or with requires_grad off (the first such call on a GPU warns once)."]
    return '"""' + "\n".join(lines) + '\n"""'


def _kernel_lines(plan: Plan, repeats: dict[str, str]) -> list[str]:
    """How many ops were fused into how many kernels, then one line per kernel (a kernel repeating
    another's code: one line for them all)."""
    graph = plan.graph
    nodes = graph.by_name()
    fused = sum(len(k.nodes) - (k.kind in ("gemm", "conv")) * sum(nodes[m].op == "aten" for m in k.nodes) for k in plan.kernels)
    reduce = [k for k in plan.kernels if k.kind == "reduce"]
    pools = [k for k in plan.kernels if k.kind == "pool"]
    convs = [k for k in plan.kernels if k.kind == "depthwise"]
    # NOTE: a row kernel may chain several anchors
    n_reduce = sum(nodes[m].is_anchor and nodes[m].op != "cat" for k in reduce for m in k.nodes)
    n_cat = sum(nodes[k.anchor].op == "cat" for k in reduce)
    anchored = ([f"{n_reduce} reductions/norms"] if n_reduce else []) + ([f"{len(pools)} pools"] if pools else []) + (
        [f"{len(convs)} depthwise convolution(s)"] if convs else []) + ([f"{n_cat} concatenation(s)"] if n_cat else [])
    what = f"{fused} ops ({' and '.join(anchored)} with their pointwise neighbours)" if anchored else (
        f"{fused} pointwise ops")
    lines = [f"Fused: {what} into {len(plan.kernels)} CUDA kernel(s):"]
    for k in plan.kernels:
        if k.name in repeats:
            continue
        ops = ", ".join(nodes[m].op for m in k.nodes)
        if k.kind == "reduce":
            lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} elements, "
                         f"{reduce_traffic(k, graph)})")
        elif k.kind == "pool":
            out = nodes[k.anchor].shape
            lines.append(f"  {k.name}: {ops}  {tuple(k.shape)} -> {tuple(out)} (one thread per output, "
                         f"{prod(out):,} outputs)")
        elif k.kind == "gemm":
            folded = ", ".join(nodes[m].op for m in k.nodes if nodes[m].op != "aten") or "nothing"
            lines.append(f"  {k.name}: our GEMM {k.anchor}, then {folded}  over {tuple(k.shape)}")
        elif k.kind == "conv":
            folded = ", ".join(nodes[m].op for m in k.nodes[1:]) or "nothing"
            lines.append(f"  {k.name}: our convolution {k.anchor}, then {folded}  over {tuple(k.shape)}")
        elif k.kind == "depthwise":
            taps = "x".join(map(str, nodes[nodes[k.anchor].args[1]].shape[2:]))
            lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} outputs of a {taps} "
                         "depthwise convolution; each input tile read once, the epilogue applied before the store)")
        else:
            lines.append(f"  {k.name}: {ops}  over {tuple(k.shape)} ({prod(k.shape):,} elements, one pass)")
        again = [r for r, first in repeats.items() if first == k.name]
        if again:
            shown = ", ".join(again[:3]) + (", ..., " + again[-1] if len(again) > 3 else "")
            lines.append(f"  {shown}: {k.name}'s code again, over their own tensors ({len(again) + 1} launches of one kernel)")
    return lines


def _shape_lines(plan: Plan) -> list[str]:
    """Which dims of which inputs the kernels are specialised to (runtime/shape_note.py warns, once, on another)."""
    tensors = [n for n in plan.graph.nodes if n.op == "input" and n.attr("value") is None]
    if not tensors:
        return []
    if plan.guard.seq:
        dims = "; ".join(f"{n.target} (batch, sequence, {', '.join(map(str, n.shape[2:]))})" for n in tensors)
        rows = any(k.batch and k.kind != "pointwise" for k in plan.kernels)
        takes = "their element count, or their rows, planes or blocks," if rows else "their element count"
        b, s = plan.guard.batch[0], plan.guard.seq
        return [f"Runtime dims: the batch and the sequence length (dims 0 and 1 of every input; captured {b} and {s}), "
                f"any sizes whose product, the tokens, is from 1 to {plan.guard.batch[1]:,}: each token is computed on "
                f"its own, and the kernels take {takes} at run time.",
                f"Specialised dims: the others, {dims}; the first call of another shape warns once, naming the dim."]
    if plan.guard.batch:
        dims = "; ".join(f"{n.target} (batch, {', '.join(map(str, n.shape[1:]))})" for n in tensors)
        rows = any(k.batch and k.kind != "pointwise" for k in plan.kernels)  # NOTE: files of pointwise kernels alone as before
        takes = "their element count, or their rows, planes or blocks," if rows else "their element count"
        return [f"Runtime dims: the batch (dim 0 of every input; captured {plan.guard.batch[0]}), any size from 1 to "
                f"{plan.guard.batch[1]:,}: the kernels take {takes} at run time.",
                f"Specialised dims: the others, {dims}; the first call of another shape warns once, naming the dim."]
    dims = "; ".join(f"{n.target} {tuple(n.shape)}" for n in tensors)
    return [f"Specialised dims: every dim of {dims}; the first call of another shape warns once, naming the dim."]
