"""Memory: which kernel outputs are written over an operand or into a module's buffer, and which views
of parameters are never made (the kernels read the tensor itself)."""
from __future__ import annotations


from torchweld.ir import LIBRARY, VIEWS, Kernel, Node, Plan, Ref
from torchweld.tiling import is_contiguous
from torchweld.simplify.conv_fold import fold_source

COPY = "aten.copy_.default"


def view_root(n: Node, nodes: dict) -> Node:
    """The node `n` is a view of (through view/reshape), or `n` itself."""
    while n.op == "aten" and n.target in VIEWS and n.args and isinstance(n.args[0], Ref):
        n = nodes[n.args[0]]
    return n


def written_over(plan: Plan) -> dict[str, str]:
    """{output: operand} for the outputs pointwise kernels write over an operand (`overwrites`), other
    than those written into a parameter or buffer (`plan.written_into`)."""
    made = frozenset(o for k in plan.kernels for o in k.outputs)
    found = {}
    seen = (plan.graph.by_name(), plan.graph.users())  # NOTE: once, not per kernel (a long loop makes many)
    for k in plan.kernels:
        if not plan.layouts.of(k):
            found.update((o, a) for o, a in overwrites(k, plan.graph, made, seen).items()
                         if o not in plan.written_into)
    return found


def overwrites(k: Kernel, graph, made: frozenset = frozenset(), seen: tuple | None = None) -> dict[str, str]:
    """{output: operand} for outputs a pointwise kernel may write over an operand: one read at the
    output's own index (same shape, contiguous), of the same dtype, that forward made itself (a
    library call's result or a kernel's output, through views that nothing else reads), read by this
    kernel alone and not returned. Each thread reads its elements before it writes them, so the
    write is safe; it saves an allocation and the pass's write traffic to new memory.

    NOTE: never for a kernel with a channels-last build (`plan.layouts`): that build reads tiles through
    shared memory, and a thread may write an element another thread has yet to read. `made`: the
    other kernels' outputs; `seen`: the graph's (by_name(), users()), where the caller has them."""
    if k.kind != "pointwise":
        return {}
    nodes, users = seen or (graph.by_name(), graph.users())
    found: dict[str, str] = {}
    for a in k.inputs:
        n = nodes[a]
        if tuple(n.shape) != tuple(k.shape) or not is_contiguous(n) or not _owned(a, k, nodes, users, made):
            continue
        out = next((x for x in k.outputs if x not in found and nodes[x].dtype == n.dtype), None)
        if out is not None:
            found[out] = a
    return found


def _owned(name: str, k: Kernel, nodes: dict, users: dict, made: frozenset) -> bool:
    """`name` is forward's own tensor, reached through views each read by the next alone, and read
    by `k` alone."""
    if any(u == "<output>" or u not in k.nodes for u in users[name]):
        return False
    n = nodes[name]
    root = view_root(n, nodes)
    while n is not root:  # NOTE: library results and kernel outputs are tensors of their own, no one else's
        src = nodes[n.args[0]]
        if users[src.name] != [n.name]:
            return False
        n = src
    return n.op == "aten" and n.target in LIBRARY or n.name in made


def written_into(plan: Plan) -> dict[str, tuple[str, str]]:
    """{kernel output: (copy_ node, parameter or buffer)} where forward's `P.copy_(K)` may become the
    kernel writing K into P itself: K is read by that copy alone and has P's shape and dtype; the
    kernel reads no view of P, and nothing reads P between the kernel and the copy (it would see the
    new values early). Saves the copy's launch and a buffer (an instance norm's running statistics:
    the mean over the batch written straight into the module's buffer). Needs `plan.gemm_sites`."""
    graph = plan.graph
    nodes, users = graph.by_name(), graph.users()
    kernel_of = {o: k for k in plan.kernels for o in k.outputs}
    at = {s: i for i, s in enumerate(plan.steps)}

    def reads(step) -> list[str]:
        k = plan.kernel(step)
        return list(k.inputs) if k is not None else (nodes[step].inputs() if step in nodes else [])

    timed = plan.timed_gemm_sites  # NOTE: `_lt_<kernel>` calls its kernel with the kernel's own operands only
    out = {}
    for n in graph.nodes:
        if n.op != "aten" or n.target != COPY or len(n.args) != 2 or n.attrs or not all(isinstance(a, Ref) for a in n.args):
            continue
        dst, src = nodes[n.args[0]], n.args[1]
        k = kernel_of.get(src)
        if (k is None or dst.op != "param" or users[src] != [n.name] or tuple(dst.shape) != tuple(nodes[src].shape)
                or dst.dtype != nodes[src].dtype or not is_contiguous(dst) or k.kind not in ("pointwise", "reduce")
                or k.name not in at or n.name not in at or k.name in timed):
            continue
        between = plan.steps[at[k.name]:at[n.name]]  # the kernel's own reads included
        if any(view_root(nodes[a], nodes).name == dst.name for step in between for a in reads(step)):
            continue
        out[src] = (n.name, dst.name)
    return out


def elided_views(plan: Plan) -> dict[str, str]:
    """{view: tensor} for views of a parameter (or a folded bias) read only by kernels: not made, the
    kernel reads the tensor's own memory, which is the same (each `.view()` costs a Python call)."""
    graph = plan.graph
    nodes, users = graph.by_name(), graph.users()
    in_kernels = {m for k in plan.kernels for m in k.nodes}
    return {n.name: n.args[0] for n in graph.nodes
            if n.op == "aten" and n.target in VIEWS and n.args and isinstance(n.args[0], Ref)
            and (nodes[n.args[0]].op == "param" or fold_source(n.args[0], nodes)) and is_contiguous(n)
            and is_contiguous(nodes[n.args[0]]) and users[n.name]
            and all(u in in_kernels for u in users[n.name])}
