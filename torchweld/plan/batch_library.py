"""How library calls that move dims, batch-first recurrences and tensors forward makes from sizes carry the
batch and the sequence length: plan/batch.py's rules for them (a permute or unbind of q, k and v for sdpa,
nn.LSTM's states and its `zeros(layers, B, H)`)."""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import Dim, Node, Ref, flat_args

PERMUTE, UNBIND = "aten.permute.default", "aten.unbind.int"
# Views with no sizes in their arguments, and whether one moves one of the `lead` outer dims (`rank`: its input's).
MOVES = {"aten.transpose.int": lambda n, rank, lead: min(n.args[1] % rank, n.args[2] % rank) < lead,
         "aten.permute.default": lambda n, rank, lead: [d % rank for d in n.args[1][:lead]] != list(range(lead)),
         "aten.unsqueeze.default": lambda n, rank, lead: n.args[1] % (rank + 1) < lead,
         "aten.squeeze.dim": lambda n, rank, lead: n.args[1] % rank < lead,
         "aten.slice.Tensor": lambda n, rank, lead: n.args[1] % rank < lead,
         "aten.select.int": lambda n, rank, lead: n.args[1] % rank < lead,
         # NOTE: a tuple: each part (a getitem) keeps the outer dims as its input's
         "aten.split.Tensor": lambda n, rank, lead: len(n.args) < 3 or n.args[2] % rank < lead}
TRANSPOSE, SELECT, SDPA = "aten.transpose.int", "aten.select.int", "aten.scaled_dot_product_attention.default"
RESHAPE = "aten.reshape.default"
# Tensors made from sizes (the argument holding them): where the batch is one, made at the runtime batch
MADE = {"aten.zeros.default": 0, "aten.ones.default": 0, "aten.full.default": 0, "aten.empty.memory_format": 0,
        "aten.new_zeros.default": 1, "aten.new_ones.default": 1, "aten.new_full.default": 1, "aten.new_empty.default": 1}


def at_batch(n: Node, at: int | None, first: str) -> Node:
    """Tensor `n` made with its size `at` the runtime batch (`first`'s dim 0), where `at` is not None."""
    if at is None:
        return n
    i = MADE[n.target]
    size = list(n.args[i])
    size[at] = Dim(first, 0)
    return replace(n, args=(*n.args[:i], size, *n.args[i + 1:]))


def made_at(n: Node, b: int) -> int | None:
    """Where the batch is among the sizes a tensor is made from (`x.new_zeros(B, H)`: 0; nn.LSTM's
    `zeros(layers, B, H)`: 1), else None."""
    if n.op != "aten" or n.target not in MADE or not isinstance(n.args[MADE[n.target]], (list, tuple)):
        return None
    size = list(n.args[MADE[n.target]])
    return 0 if size[:1] == [b] else 1 if len(size) > 2 and size[1] == b and size[0] != b else None


def recurrence(n: Node, refs: list[str], nodes: dict, batched: dict, behind: dict) -> int:
    """The batch of a batch-first recurrence (capture/recurrent.py) whose input keeps it as dim 0 and whose
    initial states keep it as dim 1, else 0 (a sequence-first one mixes the batch's dim with the steps'). Its
    output 0 keeps the batch as dim 0, its states as dim 1."""
    x, states = n.args[0], [a for a in flat_args(n.args[1:2]) if isinstance(a, Ref)]
    d = nodes[x].shape[0] if batched.get(x) == 1 else 0
    ok = n.args[-1] is True and all(behind.get(h) == d for h in states) and (set(refs) - {x} - set(states)).isdisjoint(
        batched)
    return d if ok and d else 0


def moves_outer(n: Node, refs: list[str], nodes: dict, batched: dict) -> bool:
    """Whether `n` permutes or transposes the batch or the sequence of a `(B, S, ...)` value away from the
    two outer dims (`view(B, S, 3, H, D).permute(2, 0, 3, 1, 4)`: q, k and v for sdpa)."""
    return (n.op == "aten" and n.target in (PERMUTE, TRANSPOSE) and len(refs) == 1 and batched.get(refs[0]) == 2
            and MOVES[n.target](n, len(nodes[refs[0]].shape), 2))


def moved_to(n: Node, refs: list[str], nodes: dict, moved: dict, batched: dict) -> tuple[int, int] | None:
    """Where the batch and sequence dims of `n` lie, made by a library call that moves them and reads no
    sample's tokens with another's (a permute or transpose, unbind or select of a stack in front, a getitem
    of its parts, sdpa over the sequence within each sample and head), else None."""
    def where(a):
        return moved.get(a) or ((0, 1) if batched.get(a) == 2 else None)

    pos = where(refs[0]) if refs else None
    if pos is None or n.op not in ("aten", "getitem"):
        return None
    if n.op == "getitem":
        return pos
    rank = len(nodes[refs[0]].shape)
    if n.target == PERMUTE and len(refs) == 1:
        order = [d % rank for d in n.args[1]]
        return order.index(pos[0]), order.index(pos[1])
    if n.target == TRANSPOSE and len(refs) == 1:
        swap = {n.args[1] % rank: n.args[2] % rank, n.args[2] % rank: n.args[1] % rank}
        return swap.get(pos[0], pos[0]), swap.get(pos[1], pos[1])
    front = n.args[1:2] in ((), (0,)) if n.target == UNBIND else n.target == SELECT and n.args[1] % rank == 0
    if n.target in (UNBIND, SELECT) and len(refs) == 1 and front and 0 not in pos:
        return pos[0] - 1, pos[1] - 1  # NOTE: a stack in front (q, k, v): each part keeps both dims, one earlier
    if n.target == SDPA and refs == list(n.args[:3]) and all(where(a) == pos for a in refs):
        return pos if pos[1] == len(n.shape) - 2 and pos[0] < pos[1] else None  # NOTE: attention within a sample
    return None


def unstacked(n: Node, size: int) -> int:
    """The size of dim 0 of a value taken from the front of a stack whose dim 1 is the batch (`unbind(0)`,
    `select(0, i)`), else 0."""
    if n.op == "aten" and n.target == UNBIND and n.args[1:2] in ((), (0,)):
        return size
    if n.op == "aten" and n.target == "aten.select.int" and n.args[1] == 0 and n.shape[:1] == (size,):
        return size
    return 0
