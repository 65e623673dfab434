"""The statistics each reduce anchor keeps: declare, update per element, combine, finish.

Four kinds: `acc` (one float: sum, product, max, min, |x| sums), `online` (softmax's running max
and sum of exp), `moments` (mean and squared deviations: norms, var, std) and `arg` (a value and
its index: argmax/argmin, max/min with indices). Each combines across the threads of an output
(`block`) and across the chunks of a split output (`merge`), with PyTorch's NaN/inf rules.
"""
from __future__ import annotations

import math

from torchweld.codegen.ops import lit

ONLINE = frozenset({"softmax", "log_softmax", "logsumexp"})
MOMENTS = frozenset({"layer_norm", "group_norm", "instance_norm", "var", "std"})
ARG = frozenset({"argmax", "argmin"})
# op -> (initial value, update of `acc` with element {x}, tw_comb code: 0 add, 1 max, 2 min, 3 mul)
ACC = {
    "sum": ("0.0f", "acc += {x};", 0), "mean": ("0.0f", "acc += {x};", 0),
    "amax": ("-INFINITY", "acc = tw_max(acc, {x});", 1), "amin": ("INFINITY", "acc = tw_min(acc, {x});", 2),
    "prod": ("1.0f", "acc *= {x};", 3),
    "l1": ("0.0f", "acc += fabsf({x});", 0), "l2": ("0.0f", "acc = fmaf({x}, {x}, acc);", 0),
    "linf": ("0.0f", "acc = tw_max(acc, fabsf({x}));", 1), "lninf": ("INFINITY", "acc = tw_min(acc, fabsf({x}));", 2),
}
NORM_ORDS = {1.0: "l1", 2.0: "l2", math.inf: "linf", -math.inf: "lninf"}


def kind(op: str) -> str:
    if op in ONLINE:
        return "online"
    if op in MOMENTS:
        return "moments"
    if op in ARG:
        return "arg"
    return "acc"


def acc_op(a) -> str:
    return NORM_ORDS[float(a.attr("ord"))] if a.op == "vector_norm" else a.op


def nstats(op: str) -> int:
    """Floats a chunk's partial result takes in the workspace."""
    return 1 if kind(op) == "acc" else 2


class Stats:
    """The CUDA lines of one anchor's statistics; `block_args` are the block reduction's template arguments."""

    def __init__(self, a, n: int):
        self.anchor, self.op, self.kind, self.n = a, a.op, kind(a.op), n

    def decl(self) -> list[str]:
        if self.kind == "acc":
            return [f"  float acc = {ACC[acc_op(self.anchor)][0]};"]
        if self.kind == "online":
            return ["  float m = -INFINITY, s = 0.0f;"]
        if self.kind == "moments":
            return ["  float s1 = 0.0f, s2 = 0.0f; (void)s2;"]
        return [f"  float v = {'-' if self.op == 'argmax' else ''}INFINITY;", "  int ix = 0x7fffffff;"]

    def update(self, x: str, cached: bool = False) -> list[str]:
        """Per element; moments: shifted sums about K, or plain sums when the chunk is cached."""
        if self.kind == "acc":
            return [ACC[acc_op(self.anchor)][1].format(x=x)]
        if self.kind == "online":
            return [f"tw_online({x}, m, s);"]
        if self.kind == "moments":
            return [f"s1 += {x};"] if cached else [f"const float d = {x} - K;", "s1 += d;", "s2 = fmaf(d, d, s2);"]
        return [f"if (tw_better<{'true' if self.op == 'argmax' else 'false'}>({x}, (int)r, v, ix)) {{ v = {x}; ix = (int)r; }}"]

    def block(self, block_args: str, cached: bool = False) -> list[str]:
        """Combine the threads of each output (every thread of the block calls it)."""
        if self.kind == "acc":
            return [f"  acc = tw_block_reduce<{ACC[acc_op(self.anchor)][2]}, {block_args}>(acc);"]
        if self.kind == "online":
            return [f"  const float M = tw_block_reduce<1, {block_args}>(m);",
                    f"  const float S = tw_block_reduce<0, {block_args}>(m == M ? s : s * expf(m - M));"]
        if self.kind == "moments":
            s2 = [] if cached else [f"  s2 = tw_block_reduce<0, {block_args}>(s2);"]
            return [f"  s1 = tw_block_reduce<0, {block_args}>(s1);"] + s2
        return [f"  tw_block_argreduce<{'true' if self.op == 'argmax' else 'false'}, {block_args}>(v, ix);"]

    def store(self, slot: str, stride: int) -> list[str]:
        """Write this chunk's partial result at ws[slot] (and ws[stride + slot])."""
        if self.kind == "acc":
            return [f"ws[{slot}] = acc;"]
        a, b = {"online": ("M", "S"), "moments": ("s1", "s2"), "arg": ("v", "__int_as_float(ix)")}[self.kind]
        return [f"ws[{slot}] = {a};", f"ws[{stride} + {slot}] = {b};"]

    def merge(self, slot: str, stride: int) -> list[str]:
        """Fold the partial result at ws[slot] into this thread's statistics."""
        if self.kind == "acc":
            return [f"acc = tw_comb<{ACC[acc_op(self.anchor)][2]}>(acc, ws[{slot}]);"]
        if self.kind == "online":
            return [f"tw_merge(m, s, ws[{slot}], ws[{stride} + {slot}]);"]
        if self.kind == "moments":
            return [f"s1 += ws[{slot}];", f"s2 += ws[{stride} + {slot}];"]
        return [f"{{ const float pv = ws[{slot}]; const int pi = __float_as_int(ws[{stride} + {slot}]);",
                f"  if (tw_better<{'true' if self.op == 'argmax' else 'false'}>(pv, pi, v, ix)) {{ v = pv; ix = pi; }} }}"]

    def moments(self, cached: bool) -> list[str]:
        """`mean` and `m2` (the sum of squared deviations) of the output's n elements."""
        inv = lit(1.0 / self.n, "float")
        if cached:
            return [f"  const float mean = s1 * {inv};"]  # m2 follows from a second pass over the cache
        return [f"  const float dm = s1 * {inv}, q = s2 - s1 * dm;",
                "  const float mean = K + dm, m2 = q < 0.0f ? 0.0f : q;"]

    def value(self) -> str:
        """The anchor's value for a reduction (after `block`, and `moments` for var/std)."""
        op = self.op
        if self.kind == "acc":
            if op == "mean":
                return f"acc * {lit(1.0 / self.n, 'float')}"
            return "sqrtf(acc)" if acc_op(self.anchor) == "l2" else "acc"
        if op == "logsumexp":
            # NOTE: eager logsumexp returns the infinite max itself; softmax of such a row is NaN.
            return "(S != S) ? S : isinf(M) ? M : M + logf(S)"
        if self.kind == "arg":
            return "(long long)ix"
        dof = self.n - self.anchor.attr("correction", 0)
        var = f"m2 / {lit(float(max(dof, 0)), 'float')}"
        return f"sqrtf({var})" if op == "std" else var
