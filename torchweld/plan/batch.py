"""Whether the batch (dim 0 of every tensor input) is a runtime size: where it reaches only pointwise
kernels and library calls that keep it as dim 0 (a convolution, a GEMM), the kernels take the element
count at run time and one file serves every batch size up to the largest their index type holds."""
from __future__ import annotations

from dataclasses import replace
from math import prod

from torchweld.ir import CONVOLUTION, POINTWISE, Plan, Ref, flat_args
from torchweld.tiling import is_contiguous, own_strides

# Library calls that keep the batch as dim 0 of their result: the argument positions that may carry it.
KEEPS_BATCH = {CONVOLUTION: (0,), "aten.mm.default": (0,), "aten.addmm.default": (1,), "aten.bmm.default": (0, 1)}
LIMIT = 2**31  # NOTE: kernels index with unsigned int where every offset is below this (codegen/pointwise.py)


def runtime_batch(p: Plan) -> Plan:
    """`p` with each kernel over the batch marked (Kernel.batch) and Guard.batch set, where the batch
    can be a runtime size; else `p` as it is (every dim specialised)."""
    b = _batch(p)
    if not b:
        return p
    nodes = p.graph.by_name()
    kernels = tuple(replace(k, batch=b) if nodes[k.outputs[0]].shape[:1] == (b,) and _carries(k, p, b) else k
                    for k in p.kernels)
    largest = min([_largest(k, p, b) for k in kernels if k.batch] or [0])
    if largest < b:
        return p
    return replace(p, kernels=kernels, guard=replace(p.guard, batch=(b, largest)))


def _carries(k, p: Plan, b: int) -> bool:
    return any(p.graph.by_name()[a].shape[:1] == (b,) for a in k.inputs)


def _batch(p: Plan) -> int:
    """The captured batch where it can be a runtime size, else 0."""
    graph = p.graph
    tensors = [n for n in graph.nodes if n.op == "input" and n.attr("value") is None]
    if not tensors or p.cuda_graph or any(len(n.shape) < 2 for n in tensors):
        return 0
    b = tensors[0].shape[0]
    if b < 2 or any(n.shape[0] != b for n in tensors):
        return 0
    nodes = graph.by_name()
    batched = {n.name for n in tensors}  # values whose dim 0 is the batch
    for n in graph.nodes:
        if n.op in ("input", "param"):
            continue
        refs = [a for a in flat_args(n.args) if isinstance(a, Ref)]
        carried = [a for a in refs if a in batched]
        if not carried:
            continue  # made from parameters and constants alone
        if n.op in POINTWISE:
            rank = len(n.shape)
            aligned = all(len(nodes[a].shape) == rank for a in carried)
            others = all(len(nodes[a].shape) < rank or nodes[a].shape[0] == 1 for a in refs if a not in batched)
            if not (aligned and others and n.shape[0] == b):
                return 0
        elif n.op == "aten" and n.target in KEEPS_BATCH:
            where = [i for i, a in enumerate(n.args) if isinstance(a, Ref) and a in batched]
            if not set(where) <= set(KEEPS_BATCH[n.target]) or n.shape[:1] != (b,):
                return 0
        else:
            return 0  # a view, a reduction, a norm: the batch may be mixed with other dims
        batched.add(n.name)
    for k in p.kernels:
        if any(a in batched or o in batched for a in k.inputs for o in k.outputs):
            if k.kind != "pointwise" or not all(
                    is_contiguous(nodes[a]) for a in (*k.inputs, *k.outputs) if a in batched):
                return 0
    return b


def _largest(k, p: Plan, b: int) -> int:
    """The largest batch kernel `k`'s index type holds (its offsets scale with the batch)."""
    nodes = p.graph.by_name()
    inner = prod(k.shape) // b
    reach = [1 + sum((s - 1) * st for s, st in zip(nodes[a].shape, own_strides(nodes[a].shape, nodes[a].stride)))
             for a in k.inputs]
    if max([prod(k.shape)] + reach) >= LIMIT:
        return 2**62 // inner  # NOTE: built with 64-bit indices already
    per = [prod(nodes[a].shape) // b for a in k.inputs if nodes[a].shape[:1] == (b,)]
    return (LIMIT - 1) // max([inner] + per)


def specialised(p: Plan) -> Plan:
    """`p` with every dim specialised again (the model traced at another batch gave another graph)."""
    return replace(p, kernels=tuple(replace(k, batch=0) for k in p.kernels), guard=replace(p.guard, batch=()))
