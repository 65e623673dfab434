"""What forward checks before it runs the kernels, and whether its fast path may be a CUDA graph."""
from __future__ import annotations

from torchweld.capture.recurrent import modes as recurrent_modes
from torchweld.ir import LIBRARY, Graph, Guard, Node, Plan, Ref, flat_args
from torchweld.simplify.conv_fold import fold_source


def guard(plan: Plan) -> Guard:
    """The parameters the kernels read, those a kernel is built for the shape of, the norms' modes
    the captured graph depends on, and every parameter and buffer forward reads (for grad mode)."""
    nodes = plan.graph.by_name()
    params = kernel_params(plan)
    # NOTE: a depthwise kernel is built for its weight's shape (kernel size, channels): another one
    # (a constructor given another kernel_size) takes the general path.
    weights = {fold_source(w, nodes) or w for w in (nodes[k.anchor].args[1] for k in plan.kernels
                                                    if k.kind == "depthwise")}
    modes = norm_modes(plan.graph) + recurrent_modes(plan.graph)
    held = held_state(plan.graph)  # NOTE: not moved by .cuda() or replaced by forward: checked whole
    params += tuple(p for p in held if p not in params)
    # NOTE: kernels register no backward and runtime helpers (folds, packs) make their tensors under no_grad:
    # where autograd would record anything, the original forward runs.
    grads = tuple(n.name for n in plan.graph.nodes if n.op == "param" and ("float" in n.dtype or "complex" in n.dtype))
    return Guard(params, tuple(p for p in params if p in weights or p in held), modes, grads)


def held_state(graph: Graph) -> tuple[str, ...]:
    """The state forward reads that is a plain tensor attribute or that it assigns anew (capture/state.py):
    nothing keeps its device, dtype or shape (a hand-written RNN's hidden state, moved by the
    original forward on its first call)."""
    held = [n.name for n in graph.nodes if n.op == "param" and (n.attr("plain") or n.target in graph.writes)]
    if not held:
        return ()
    read = {r for m in graph.nodes for r in m.inputs()} | set(graph.outputs)
    return tuple(p for p in held if p in read)


def kernel_params(plan: Plan) -> tuple[str, ...]:
    """Each parameter a kernel reads, directly, through the aten calls before it that run in PyTorch
    (views such as a select, a slice or a transpose; a bias moved into the kernel), or through a fold
    (the weight it was folded from)."""
    nodes = plan.graph.by_name()
    found: list[str] = []
    for k in plan.kernels:
        for a in k.inputs:
            for n in _reached(nodes[a], nodes):
                if n.op == "param" and n.name not in found:
                    found.append(n.name)
    return tuple(found)


def _reached(n: Node, nodes: dict[str, Node]) -> list[Node]:
    """`n` and the values it is made from in PyTorch outside a library call (whose own checks hold)."""
    out, todo, seen = [], [n], set()
    while todo:
        n = todo.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        if fold_source(n.name, nodes):  # NOTE: a folded tensor has its conv weight's dtype and device
            n = nodes[fold_source(n.name, nodes)]
        out.append(n)
        if n.op in ("aten", "getitem") and n.target not in LIBRARY:
            todo += [nodes[r] for r in flat_args(n.args) if isinstance(r, Ref)]
    return out


def norm_modes(graph: Graph) -> tuple[tuple[str, bool], ...]:
    """(module, training) for each batch norm whose mode the captured graph depends on."""
    out = []
    for n in graph.nodes:
        if n.op != "param" or n.target.split(".")[-1] != "running_mean":
            continue
        readers = [m for m in graph.nodes if n.name in m.inputs()]
        if not readers:
            continue
        readers += [r for m in readers if m.target == "aten.repeat.default"  # instance norm's repeated stats
                    for r in graph.nodes if m.name in r.inputs()]
        training = any(m.op in ("batch_norm", "instance_norm") or (m.target == "aten.native_batch_norm.default"
                                                                  and bool(m.args[5])) for m in readers)
        path = n.target.rsplit(".", 1)[0] if "." in n.target else ""
        out.append((path, training))
    return tuple(out)


def graph_blockers(graph: Graph) -> tuple[str, ...]:
    """Why the forward cannot be replayed as a CUDA graph (empty: it can)."""
    why = []
    if graph.writes:
        why.append("it assigns module state anew (" + ", ".join(graph.writes) + ")")
    if any(n.op == "aten" and n.target.split(".")[1].endswith("_") for n in graph.nodes):
        why.append("it updates buffers in place (a replayed warm-up would update them again)")
    if any(n.op == "batch_norm" for n in graph.nodes):
        why.append("a training-mode batch norm updates its running statistics")
    if not any(n.op == "input" and n.attr("value") is None for n in graph.nodes):
        why.append("it takes no tensor input")
    return tuple(why)
