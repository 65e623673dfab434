"""Whether the batch (dim 0 of every tensor input) is a runtime size: where every value it reaches keeps it
as an outer dim of its own, each sample computed on its own (pointwise ops, library calls that keep it as
dim 0, reductions, softmax and norms within a sample, pools, depthwise convolutions, scans and cats along
another dim, views that keep each sample whole rows of dim 0: `(B, S, D) -> (B*S, D)`, slices, splits and
permutes behind dim 0, a stack put in front of it that is unbound again: q, k, v, batch-first recurrences,
and tensors forward makes at the batch's size: `x.new_zeros(B, H)`, nn.LSTM's `zeros(layers, B, H)`, made per call
instead of once), the kernels take it at run time and one file serves every batch size up to the largest their index type holds. Anything that mixes
samples (batch norm's statistics, a sum over dim 0, a view across samples) keeps every dim specialised.

Sequence-shaped inputs (every tensor input `(B, S, D)`) take their sequence length at run time too where each
token is computed on its own in the same way: every value keeps `(B, S)` as its two outer dims, or their
product as dim 0 (`(B*S, D)`, a linear's), and the kernels take the tokens (`B*S`) where they took the batch;
library calls alone may move both dims elsewhere (q, k, v permuted for sdpa, which attends within a sample).
Anything that mixes tokens in a kernel (attention written out, a mean or scan over the sequence, a parameter
sized by it) leaves the sequence specialised, and the batch as above."""
from __future__ import annotations

from dataclasses import replace
from math import prod

from torchweld.capture.recurrent import is_recurrence
from torchweld.ir import (ANCHORS, AUX, CONCAT, CONV, CONVOLUTION, NORM, POINTWISE, POOL, VIEWS, Dim, Node, Plan,
                          Ref, flat_args)
from torchweld.plan.batch_library import (MOVES, PERMUTE, RESHAPE, UNBIND, at_batch, made_at, moved_to,
                                          moves_outer, recurrence, unstacked)
from torchweld.tiling import own_strides

# Library calls that keep the batch as dim 0 of their result: the argument positions that may carry it.
KEEPS_BATCH = {CONVOLUTION: (0,), "aten.mm.default": (0,), "aten.addmm.default": (1,), "aten.bmm.default": (0, 1),
               "aten.mv.default": (0,), "aten.scaled_dot_product_attention.default": (0, 1, 2)}
# Kernel kinds whose grid or row count scales with a runtime batch (codegen's `outer`); gemm and conv: specialised.
KINDS = frozenset({"pointwise", "reduce", "pool", "depthwise"})
EXPAND, SPLIT = "aten.expand.default", "aten.split.Tensor"
LIMIT = 2**31  # NOTE: kernels index with unsigned int where every offset is below this (codegen/pointwise.py)
NO = (0, 0)  # (outer size, lead) of a value that does not keep the batch


def runtime_batch(p: Plan, seq: bool = True) -> Plan:
    """`p` with each kernel over the batch marked (Kernel.batch: the captured size of its outer dims, the
    batch, or the tokens, times a constant) and Guard.batch set, where the batch can be a runtime size, and
    Guard.seq where the sequence length can be one too (tried first unless `seq` is false); else `p`."""
    for tokens in (True, False) if seq else (False,):
        b, s, batched, restored, made = _batch(p, tokens)
        if not b:
            continue
        units = b * (s or 1)  # NOTE: what the guard bounds: samples, or tokens where the sequence is a runtime size
        nodes = p.graph.by_name()
        kernels = tuple(replace(k, batch=prod(nodes[k.outputs[0]].shape[:batched[k.outputs[0]]]),
                                lead=batched[k.outputs[0]]) if k.outputs[0] in batched else k for k in p.kernels)
        largest = min([_largest(k, p, units) for k in kernels if k.batch] or [0])
        if largest < units:
            continue
        first = next(n.name for n in p.graph.nodes if n.op == "input" and n.attr("value") is None)
        # NOTE: a view of what a library call brought back in front (sdpa's output transposed) reshapes: at
        # another length the call may lay its result out otherwise, where a view would fail
        graph = replace(p.graph, nodes=tuple(
            replace(n, args=(n.args[0], _sizes(n, batched[n.name], first)),
                    target=RESHAPE if n.args[0] in restored and n.target in VIEWS else n.target)
            if n.name in batched and sized_view(n) else at_batch(n, made.get(n.name), first) for n in p.graph.nodes))
        # NOTE: a tensor made at the batch's size is made per call: no longer once, by `_tw_held`
        return replace(p, graph=graph, kernels=kernels, guard=replace(p.guard, batch=(b, largest), seq=s),
                       held=tuple(h for h in p.held if h not in made))
    return p


def _sizes(n: Node, lead: int, first: str) -> list:
    """A view's sizes where its outer dims are runtime sizes: dim 0 from its input (`view(-1, ...)`: its
    captured size is no constant) and the sequence, where it is a dim of its own, from the first input."""
    return [-1, *n.shape[1:]] if lead == 1 else [-1, Dim(first, 1), *n.shape[2:]]


def sized_view(n: Node) -> bool:
    """A reshape or expand that names its sizes (`x.view(x.size(0), -1)` is traced with the batch's)."""
    return (n.op == "aten" and n.target in VIEWS | {EXPAND} and len(n.args) == 2 and isinstance(n.args[1], (list, tuple))
            and len(n.args[1]) == len(n.shape) > 0)


def _keeps(n: Node, batched: dict, nodes: dict, lead: int) -> bool:
    """Whether anchor `n` (a reduction, norm, pool, depthwise convolution, scan or cat) keeps the `lead` outer
    dims of its batched input as outer dims of its iteration: each sample (or token) reduced or pooled on its own."""
    refs = n.inputs()
    rank = len(nodes[refs[0]].shape) if refs else 0
    if n.op in CONCAT:
        return n.attr("dim") % rank >= lead and all(r in batched for r in refs)
    if not refs or refs[0] not in batched or any(r in batched for r in refs[1:]):
        return False  # NOTE: a weight, a running statistic: only the data may carry the batch
    if n.op == "batch_norm" or lead > 1 and n.op in (NORM | POOL | CONV) - {"layer_norm"}:
        return False  # statistics over the batch; norms, pools and convolutions whose channels are the sequence
    if n.op == "instance_norm":
        return not isinstance(n.args[3], Ref)  # NOTE: running statistics average over the batch
    if n.op in ("group_norm",) or n.op in POOL or n.op in CONV:
        return rank >= 3
    return all(d % rank >= lead for d in n.attr("dims", (0,)))


def _broadcast(shape: tuple, rank: int, lead: int) -> bool:
    """Whether an operand of `shape`, broadcast against a value of `rank` dims, is the same for every sample
    (and token): size 1 wherever it lines up with one of the `lead` outer dims."""
    return all(shape[i - (rank - len(shape))] == 1 for i in range(max(0, rank - len(shape)), lead))


def _dim0(n: Node, refs: list[str], carried: list[str], nodes: dict, batched: dict, units: int,
          seq: int) -> tuple[int, int]:
    """(the captured size of `n`'s outer dims, how many) where it keeps the batch (the batch, or the tokens,
    times a constant, as its batched operands' outer dims do), else NO."""
    lead = batched[carried[0]]
    outer = tuple(nodes[carried[0]].shape[:lead])
    d = prod(outer)
    if n.op in POINTWISE:
        rank = len(n.shape)
        aligned = all(len(nodes[a].shape) == rank and tuple(nodes[a].shape[:lead]) == outer for a in carried)
        others = all(_broadcast(nodes[a].shape, rank, lead) for a in refs if a not in carried)
        return (d, lead) if aligned and others else NO
    if n.op == "aten" and n.target in KEEPS_BATCH:
        where = [i for i, a in enumerate(n.args) if isinstance(a, Ref) and a in carried]
        return (d, 1) if lead == 1 and set(where) <= set(KEEPS_BATCH[n.target]) else NO
    if n.op == "aten" and n.target in VIEWS:
        # NOTE: a reshape keeps the order of elements: each sample (token) stays one run of whole rows of dim 0
        if not sized_view(n) or len(refs) != 1:
            return NO
        if n.shape[0] % units == 0:
            return n.shape[0], 1
        return (units, 2) if seq and tuple(n.shape[:2]) == (units // seq, seq) else NO
    if n.op == "aten" and n.target == EXPAND:  # NOTE: one that keeps the outer dims as they are (`expand(-1, ...)`)
        same = len(n.shape) == len(nodes[refs[0]].shape)  # NOTE: no new leading dim: -1 keeps dim 0's size
        return (d, lead) if sized_view(n) and len(refs) == 1 and same and tuple(n.shape[:lead]) == outer else NO
    if n.op == "aten" and n.target in MOVES:
        return (d, lead) if len(refs) == 1 and not MOVES[n.target](n, len(nodes[refs[0]].shape), lead) else NO
    if n.op in ANCHORS:
        same = all(tuple(nodes[a].shape[:lead]) == outer for a in carried)
        return (d, lead) if same and _keeps(n, batched, nodes, lead) else NO
    return (d, lead) if n.op in (AUX, "getitem") else NO  # NOTE: a companion (a max's index), a part of a split


def _batch(p: Plan, tokens: bool) -> tuple[int, int, dict[str, int], set[str], dict[str, int]]:
    """(the captured batch, the captured sequence length where `tokens` and that is a runtime size too, else 0,
    {value: how many of its outer dims carry them}, the values a library call brought back in front, {tensor
    made from sizes: the one that is the batch}) where the batch can be a runtime size, else (0, 0, {}, set(), {})."""
    fail = 0, 0, {}, set(), {}
    graph = p.graph
    tensors = [n for n in graph.nodes if n.op == "input" and n.attr("value") is None]
    if not tensors or p.cuda_graph or any(len(n.shape) < 2 for n in tensors):
        return fail
    b = tensors[0].shape[0]
    if b < 2 or any(n.shape[0] != b for n in tensors):
        return fail
    seq = tensors[0].shape[1] if tokens else 0
    if tokens and (seq < 2 or any(len(n.shape) != 3 or n.shape[1] != seq for n in tensors)):
        return fail  # NOTE: sequence-shaped: every input (batch, sequence, features)
    units = b * (seq or 1)
    nodes = graph.by_name()
    batched = {n.name: 1 + bool(seq) for n in tensors}  # values whose outer dims are the batch (tokens) times a constant
    parts: dict[str, tuple[int, int]] = {}  # a split or unbind (a tuple): its parts' outer size and dims
    behind: dict[str, int] = {}  # values whose dim 1 is the batch (q, k and v stacked in front): its size
    # with the sequence: values that library calls alone read (sdpa's q, k, v and output, their permutes, an
    # unbound stack), whose batch and sequence dims are not the two outer ones: where they are
    moved: dict[str, tuple[int, int]] = {}
    restored: set[str] = set()  # values brought back in front by a library call: their strides are its choice
    made: dict[str, int] = {}  # tensors made at the batch's size (h0 = zeros(layers, B, H)): where it is
    recurrent: dict[str, int] = {}  # batch-first recurrences (a tuple): their batch
    for n in graph.nodes:
        if n.op in ("input", "param"):
            continue
        refs = [a for a in flat_args(n.args) if isinstance(a, Ref)]
        carried = [a for a in refs if a in batched or a in behind or a in moved or a in recurrent]
        at = made_at(n, b) if not seq else None
        if at is not None:  # NOTE: pipeline.batch_checked sees the size follow the batch, or specialises
            made[n.name] = at
            if at == 0:
                batched[n.name] = 1
            else:
                behind[n.name] = b
            continue
        if not carried:
            continue  # made from parameters and constants alone
        if is_recurrence(n):
            d = recurrence(n, refs, nodes, batched, behind)
            if not d:
                return fail
            recurrent[n.name] = d
            continue
        if n.op == "getitem" and carried[0] in recurrent:  # NOTE: output 0 (B, S, H), the states (layers, B, H)
            if n.args[1] == 0:
                batched[n.name] = 1
            else:
                behind[n.name] = recurrent[carried[0]]
            continue
        if seq and (any(a in moved for a in carried) or moves_outer(n, refs, nodes, batched)):
            pos = moved_to(n, refs, nodes, moved, batched)
            if pos is None or pos != (0, 1) and not (n.shape == () or n.shape[pos[0]] % b == 0 and n.shape[pos[1]] == seq):
                return fail
            if pos == (0, 1):
                if n.shape[1] != seq or n.shape[0] % b:
                    return fail
                batched[n.name] = 2  # NOTE: back in front (a transpose of sdpa's output): the usual rules again
                restored.add(n.name)
            else:
                moved[n.name] = pos
            continue
        if len({batched.get(a, 1) for a in carried}) > 1:
            return fail
        if n.op == "getitem":
            d, lead = parts.get(carried[0], NO)
        elif any(a in behind for a in carried):  # NOTE: nothing but unbind and select may read such a value
            d, lead = (unstacked(n, behind[carried[0]]), 1) if carried == refs[:1] and carried[0] in behind else NO
        elif (not seq and n.op == "aten" and n.target == PERMUTE and len(refs) == 1 and n.args[1][1] == 0
              and len(n.shape) > 2):
            behind[n.name] = nodes[refs[0]].shape[0]  # NOTE: a stack of per-sample values in front of dim 0
            continue
        else:
            d, lead = _dim0(n, refs, carried, nodes, batched, units, seq)
        if n.shape == () and n.target in (SPLIT, UNBIND) and d:
            parts[n.name] = (d, 1) if n.target == UNBIND else (prod(nodes[refs[0]].shape[:lead]), lead)
        elif not d or len(n.shape) < lead or prod(n.shape[:lead]) != d:
            return fail
        batched[n.name] = lead
    for k in p.kernels:
        if any(a in behind or a in moved for a in (*k.inputs, *k.outputs)):
            return fail
        if any(a in batched for a in (*k.inputs, *k.outputs)):
            o = k.outputs[0]
            lead = batched.get(o, 1)
            outer = tuple(nodes[o].shape[:lead])
            ok = k.kind in KINDS and o in batched and all(
                batched[a] == lead and tuple(nodes[a].shape[:lead]) == outer and _outermost(nodes[a], lead)
                for a in (*k.inputs, *k.outputs) if a in batched)
            # NOTE: the wrapper reads the batch from an operand whose outer dims have its sizes: only the batched may
            alike = [a for a in k.inputs if a not in batched and tuple(nodes[a].shape[:lead]) == outer]
            if not ok or (k.kind != "pointwise" and alike):
                return fail
    if any(u in p.held and u not in made for m in made for u in graph.users()[m]):
        return fail  # NOTE: a value made once from a tensor made per batch
    return b, seq, batched, restored, made


def _outermost(n: Node, lead: int = 1) -> bool:
    """Dim 0 is outermost in memory, each sample one run past the last: kernels index it with no modulo,
    at strides that do not change with the batch (a slice, a split's part, a permute behind dim 0). Where the
    sequence is a runtime size too (`lead` 2), dims 0 and 1 are one such dim: dim 0's stride, the only one that
    changes with the sequence length, is the length times dim 1's."""
    st = own_strides(tuple(n.shape), tuple(n.stride))
    if lead > 1:
        if st[0] != n.shape[1] * st[1]:
            return False
        return _outermost(replace(n, shape=(n.shape[0] * n.shape[1], *n.shape[2:]), stride=st[1:]))
    return st[0] >= 1 + sum((s - 1) * t for s, t in zip(n.shape[1:], st[1:]))


def _share(n: Node, d: int, lead: int = 1) -> int:
    """The elements one row of dim 0 (one token, where `lead` is 2) spans in memory (its stride; a contiguous
    value's share of its size)."""
    if lead > 1:
        return prod(n.shape) // d  # NOTE: contiguous (_outermost)
    return max(prod(n.shape) // d, own_strides(tuple(n.shape), tuple(n.stride))[0])


def _largest(k, p: Plan, b: int) -> int:
    """The largest batch (`b`: the captured one; or tokens) kernel `k`'s index type holds (its offsets scale
    with its outer size, the batch or tokens times a constant)."""
    nodes = p.graph.by_name()
    d = k.batch
    inner = prod(k.shape) // d
    reach = [1 + sum((s - 1) * st for s, st in zip(nodes[a].shape, own_strides(nodes[a].shape, nodes[a].stride)))
             for a in k.inputs]
    if k.kind != "pointwise":  # NOTE: dim 0 goes as a 32-bit size; outputs may outgrow the iteration (a pool's)
        per = [_share(nodes[a], d, k.lead) for a in (*k.inputs, *k.outputs) if prod(nodes[a].shape[:k.lead]) == d]
        wide = max([prod(k.shape)] + reach + [x * d for x in per]) >= LIMIT
        most = min(2**62 // max([inner] + per) if wide else (LIMIT - 1) // max([inner] + per), LIMIT - 1)
        return most // (d // b)
    if max([prod(k.shape)] + reach) >= LIMIT:
        return 2**62 // inner // (d // b)  # NOTE: built with 64-bit indices already
    per = [_share(nodes[a], d, k.lead) for a in k.inputs if prod(nodes[a].shape[:k.lead]) == d]
    return (LIMIT - 1) // max([inner] + per) // (d // b)


def specialised(p: Plan, captured) -> Plan:
    """`p` with every dim specialised again (the model traced at another batch gave another graph), each
    view's sizes as in `captured`, the graph the plan was made from."""
    views = {n.name: n for n in captured.nodes if sized_view(n)}  # NOTE: a reshape (runtime_batch's) a view again
    graph = replace(p.graph, nodes=tuple(replace(n, args=views[n.name].args, target=views[n.name].target)
                                         if n.name in views else n for n in p.graph.nodes))
    return replace(p, graph=graph, kernels=tuple(replace(k, batch=0, lead=1) for k in p.kernels),
                   guard=replace(p.guard, batch=(), seq=0))
