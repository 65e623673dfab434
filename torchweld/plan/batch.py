"""Whether the batch (dim 0 of every tensor input) is a runtime size: where every value it reaches keeps it
as an outer dim of its own, each sample computed on its own (pointwise ops, library calls that keep it as
dim 0, reductions, softmax and norms within a sample, pools, depthwise convolutions, scans and cats along
another dim, views that keep each sample whole rows of dim 0: `(B, S, D) -> (B*S, D)`, slices, splits and
permutes behind dim 0, and a stack put in front of it that is unbound again: q, k, v), the kernels take it at
run time and one file serves every batch size up to the largest their index type holds. Anything that mixes
samples (batch norm's statistics, a sum over dim 0, a view across samples) keeps every dim specialised."""
from __future__ import annotations

from dataclasses import replace
from math import prod

from torchweld.ir import (ANCHORS, AUX, CONCAT, CONV, CONVOLUTION, POINTWISE, POOL, VIEWS, Node, Plan, Ref,
                          flat_args)
from torchweld.tiling import own_strides

# Library calls that keep the batch as dim 0 of their result: the argument positions that may carry it.
KEEPS_BATCH = {CONVOLUTION: (0,), "aten.mm.default": (0,), "aten.addmm.default": (1,), "aten.bmm.default": (0, 1),
               "aten.mv.default": (0,), "aten.scaled_dot_product_attention.default": (0, 1, 2)}
# Views with no sizes in their arguments, and whether one moves dim 0 (`rank`: its input's).
MOVES = {"aten.transpose.int": lambda n, rank: 0 in (n.args[1] % rank, n.args[2] % rank),
         "aten.permute.default": lambda n, rank: n.args[1][0] % rank != 0,
         "aten.unsqueeze.default": lambda n, rank: n.args[1] % (rank + 1) == 0,
         "aten.squeeze.dim": lambda n, rank: n.args[1] % rank == 0,
         "aten.slice.Tensor": lambda n, rank: n.args[1] % rank == 0, "aten.select.int": lambda n, rank: n.args[1] % rank == 0,
         # NOTE: a tuple: each part (a getitem) keeps dim 0 as its input's
         "aten.split.Tensor": lambda n, rank: len(n.args) < 3 or n.args[2] % rank == 0}
# Kernel kinds whose grid or row count scales with a runtime batch (codegen's `outer`); gemm and conv: specialised.
KINDS = frozenset({"pointwise", "reduce", "pool", "depthwise"})
EXPAND, PERMUTE, SPLIT, UNBIND = "aten.expand.default", "aten.permute.default", "aten.split.Tensor", "aten.unbind.int"
LIMIT = 2**31  # NOTE: kernels index with unsigned int where every offset is below this (codegen/pointwise.py)


def runtime_batch(p: Plan) -> Plan:
    """`p` with each kernel over the batch marked (Kernel.batch: the captured size of its dim 0, the batch
    times a constant) and Guard.batch set, where the batch can be a runtime size; else `p` as it is."""
    b, batched = _batch(p)
    if not b:
        return p
    nodes = p.graph.by_name()
    kernels = tuple(replace(k, batch=nodes[k.outputs[0]].shape[0]) if k.outputs[0] in batched else k
                    for k in p.kernels)
    largest = min([_largest(k, p, b) for k in kernels if k.batch] or [0])
    if largest < b:
        return p
    # NOTE: a view that keeps the batch takes it from its input (`view(-1, ...)`): its captured size is no constant
    graph = replace(p.graph, nodes=tuple(replace(n, args=(n.args[0], [-1, *n.shape[1:]])) if n.name in batched
                                         and sized_view(n) else n for n in p.graph.nodes))
    return replace(p, graph=graph, kernels=kernels, guard=replace(p.guard, batch=(b, largest)))


def sized_view(n: Node) -> bool:
    """A reshape or expand that names its sizes (`x.view(x.size(0), -1)` is traced with the batch's)."""
    return (n.op == "aten" and n.target in VIEWS | {EXPAND} and len(n.args) == 2 and isinstance(n.args[1], (list, tuple))
            and len(n.args[1]) == len(n.shape) > 0)


def _keeps(n: Node, batched: set[str], nodes: dict) -> bool:
    """Whether anchor `n` (a reduction, norm, pool, depthwise convolution, scan or cat) keeps dim 0 of its
    batched input as an outer dim of its iteration: each sample reduced or pooled on its own."""
    refs = n.inputs()
    if n.op in CONCAT:
        return n.attr("dim") != 0 and all(r in batched for r in refs)
    if not refs or refs[0] not in batched or any(r in batched for r in refs[1:]):
        return False  # NOTE: a weight, a running statistic: only the data may carry the batch
    if n.op == "batch_norm":
        return False  # statistics over the batch
    if n.op == "instance_norm":
        return not isinstance(n.args[3], Ref)  # NOTE: running statistics average over the batch
    if n.op in ("group_norm",) or n.op in POOL or n.op in CONV:
        return len(nodes[refs[0]].shape) >= 3
    return 0 not in n.attr("dims", (0,))


def _dim0(n: Node, refs: list[str], carried: list[str], nodes: dict, b: int) -> int:
    """The size of `n`'s dim 0 where it keeps the batch (the batch times a constant, as its batched
    operands' dim 0 does), else 0."""
    first = nodes[carried[0]].shape[0]
    if n.op in POINTWISE:
        rank = len(n.shape)
        aligned = all(len(nodes[a].shape) == rank and nodes[a].shape[0] == first for a in carried)
        others = all(len(nodes[a].shape) < rank or nodes[a].shape[0] == 1 for a in refs if a not in carried)
        return first if aligned and others else 0
    if n.op == "aten" and n.target in KEEPS_BATCH:
        where = [i for i, a in enumerate(n.args) if isinstance(a, Ref) and a in carried]
        return first if set(where) <= set(KEEPS_BATCH[n.target]) else 0
    if n.op == "aten" and n.target in VIEWS:
        # NOTE: a reshape keeps the order of elements: each sample stays one run of whole rows of dim 0
        return n.shape[0] if sized_view(n) and len(refs) == 1 and n.shape[0] % b == 0 else 0
    if n.op == "aten" and n.target == EXPAND:  # NOTE: one that keeps dim 0 as it is (`expand(-1, ...)`)
        same = len(n.shape) == len(nodes[refs[0]].shape)  # NOTE: no new leading dim: -1 keeps dim 0's size
        return first if sized_view(n) and len(refs) == 1 and same and n.shape[0] == first else 0
    if n.op == "aten" and n.target in MOVES:
        return first if len(refs) == 1 and not MOVES[n.target](n, len(nodes[refs[0]].shape)) else 0
    if n.op in ANCHORS:
        return first if all(nodes[a].shape[0] == first for a in carried) and _keeps(n, set(carried), nodes) else 0
    return first if n.op in (AUX, "getitem") else 0  # NOTE: a companion (a max's index), a part of a split


def _batch(p: Plan) -> tuple[int, set[str]]:
    """(the captured batch, the values whose dim 0 carries it) where it can be a runtime size, else (0, ())."""
    graph = p.graph
    tensors = [n for n in graph.nodes if n.op == "input" and n.attr("value") is None]
    if not tensors or p.cuda_graph or any(len(n.shape) < 2 for n in tensors):
        return 0, set()
    b = tensors[0].shape[0]
    if b < 2 or any(n.shape[0] != b for n in tensors):
        return 0, set()
    nodes = graph.by_name()
    batched = {n.name for n in tensors}  # values whose dim 0 is the batch times a constant
    parts: dict[str, int] = {}  # a split or unbind (a tuple): the size of its parts' dim 0
    behind: dict[str, int] = {}  # values whose dim 1 is the batch (q, k and v stacked in front): its size
    for n in graph.nodes:
        if n.op in ("input", "param"):
            continue
        refs = [a for a in flat_args(n.args) if isinstance(a, Ref)]
        carried = [a for a in refs if a in batched or a in behind]
        if not carried:
            continue  # made from parameters and constants alone
        if n.op == "getitem":
            d = parts.get(carried[0], 0)
        elif any(a in behind for a in carried):  # NOTE: nothing but unbind and select may read such a value
            d = _unstacked(n, behind[carried[0]]) if carried == refs[:1] and carried[0] in behind else 0
        elif n.op == "aten" and n.target == PERMUTE and len(refs) == 1 and n.args[1][1] == 0 and len(n.shape) > 2:
            behind[n.name] = nodes[refs[0]].shape[0]  # NOTE: a stack of per-sample values in front of dim 0
            continue
        else:
            d = _dim0(n, refs, carried, nodes, b)
        if n.shape == () and n.target in (SPLIT, UNBIND) and d:
            parts[n.name] = d if n.target == UNBIND else nodes[refs[0]].shape[0]
        elif not d or n.shape[:1] != (d,):
            return 0, set()
        batched.add(n.name)
    for k in p.kernels:
        if any(a in behind for a in (*k.inputs, *k.outputs)):
            return 0, set()
        if any(a in batched for a in (*k.inputs, *k.outputs)):
            d = nodes[k.outputs[0]].shape[0]
            ok = k.kind in KINDS and k.outputs[0] in batched and all(
                nodes[a].shape[0] == d and _outermost(nodes[a]) for a in (*k.inputs, *k.outputs) if a in batched)
            # NOTE: the wrapper reads the batch from an operand whose dim 0 has its size: only the batched may
            alike = [a for a in k.inputs if a not in batched and nodes[a].shape[:1] == (d,)]
            if not ok or (k.kind != "pointwise" and alike):
                return 0, set()
    return b, batched


def _unstacked(n: Node, size: int) -> int:
    """The size of dim 0 of a value taken from the front of a stack whose dim 1 is the batch (`unbind(0)`,
    `select(0, i)`), else 0."""
    if n.op == "aten" and n.target == UNBIND and n.args[1:2] in ((), (0,)):
        return size
    if n.op == "aten" and n.target == "aten.select.int" and n.args[1] == 0 and n.shape[:1] == (size,):
        return size
    return 0


def _outermost(n: Node) -> bool:
    """Dim 0 is outermost in memory, each sample one run past the last: kernels index it with no modulo,
    at strides that do not change with the batch (a slice, a split's part, a permute behind dim 0)."""
    st = own_strides(tuple(n.shape), tuple(n.stride))
    return st[0] >= 1 + sum((s - 1) * t for s, t in zip(n.shape[1:], st[1:]))


def _share(n: Node, d: int) -> int:
    """The elements one row of dim 0 spans in memory (its stride; a contiguous value's share of its size)."""
    return max(prod(n.shape) // d, own_strides(tuple(n.shape), tuple(n.stride))[0])


def _largest(k, p: Plan, b: int) -> int:
    """The largest batch kernel `k`'s index type holds (its offsets scale with its dim 0, the batch times
    a constant)."""
    nodes = p.graph.by_name()
    d = k.batch
    inner = prod(k.shape) // d
    reach = [1 + sum((s - 1) * st for s, st in zip(nodes[a].shape, own_strides(nodes[a].shape, nodes[a].stride)))
             for a in k.inputs]
    if k.kind != "pointwise":  # NOTE: dim 0 goes as a 32-bit size; outputs may outgrow the iteration (a pool's)
        per = [_share(nodes[a], d) for a in (*k.inputs, *k.outputs) if nodes[a].shape[:1] == (d,)]
        wide = max([prod(k.shape)] + reach + [x * d for x in per]) >= LIMIT
        most = min(2**62 // max([inner] + per) if wide else (LIMIT - 1) // max([inner] + per), LIMIT - 1)
        return most // (d // b)
    if max([prod(k.shape)] + reach) >= LIMIT:
        return 2**62 // inner // (d // b)  # NOTE: built with 64-bit indices already
    per = [_share(nodes[a], d) for a in k.inputs if nodes[a].shape[:1] == (d,)]
    return (LIMIT - 1) // max([inner] + per) // (d // b)


def specialised(p: Plan, captured) -> Plan:
    """`p` with every dim specialised again (the model traced at another batch gave another graph), each
    view's sizes as in `captured`, the graph the plan was made from."""
    views = {n.name: n.args for n in captured.nodes if sized_view(n)}
    graph = replace(p.graph, nodes=tuple(replace(n, args=views[n.name]) if n.name in views else n
                                         for n in p.graph.nodes))
    return replace(p, graph=graph, kernels=tuple(replace(k, batch=0) for k in p.kernels),
                   guard=replace(p.guard, batch=()))
