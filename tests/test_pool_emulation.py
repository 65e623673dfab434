"""The pool kernel's index math, run in Python: the C expressions codegen/pool.py writes (output
coordinates, window bounds, divisors, operand offsets) are evaluated on torch tensors for every
output, and the pooled result is compared with torch's own CPU pooling over many settings
(kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override, adaptive
sizes, odd sizes, channels-last, unbatched), with NaN and inf in the data. No GPU needed."""
from __future__ import annotations

import random
import re

import pytest
import torch
import torch.nn.functional as F

from helpers import graphs
from torchweld.codegen.pool import Geometry, dense_strides
from torchweld.ir import POOL


class V:
    """A C value over many threads at once: integer ops truncate (on non-negative operands, where
    C and Python agree), float ops are fp32."""

    def __init__(self, t):
        self.t = t if isinstance(t, torch.Tensor) else torch.tensor(t)

    @staticmethod
    def _t(o):
        return o.t if isinstance(o, V) else torch.tensor(o)

    def _int(self, o) -> bool:
        return not self.t.is_floating_point() and not self._t(o).is_floating_point()

    def _bin(self, o, fn, swap=False):
        a, b = (self._t(o), self.t) if swap else (self.t, self._t(o))
        return V(fn(a, b))

    def __add__(self, o): return self._bin(o, torch.add)
    def __radd__(self, o): return self._bin(o, torch.add, True)
    def __sub__(self, o): return self._bin(o, torch.sub)
    def __rsub__(self, o): return self._bin(o, torch.sub, True)
    def __mul__(self, o): return self._bin(o, torch.mul)
    def __rmul__(self, o): return self._bin(o, torch.mul, True)
    def __lt__(self, o): return self._bin(o, torch.lt)
    def __le__(self, o): return self._bin(o, torch.le)
    def __gt__(self, o): return self._bin(o, torch.gt)
    def __ge__(self, o): return self._bin(o, torch.ge)
    def __or__(self, o): return self._bin(o, torch.logical_or)

    def __truediv__(self, o):
        if self._int(o):
            a, b = self.t, self._t(o)
            assert (a >= 0).all() and (b > 0).all(), "C and Python integer division differ here"
            return V(torch.div(a, b, rounding_mode="floor"))
        return V(self.t.float() / self._t(o).float())

    def __rtruediv__(self, o):
        return V(self._t(o)) / self

    def __mod__(self, o):
        a, b = self.t, self._t(o)
        assert self._int(o) and (a >= 0).all() and (b > 0).all()
        return V(torch.remainder(a, b))


def _cast(kind):
    def fn(v):
        t = V._t(v)
        if kind == "float":
            return V(t.float())
        assert not t.is_floating_point()
        if kind in ("unsigned", "long"):
            assert (t >= 0).all(), "a negative value cast to unsigned"
        return V(t.long())
    return fn


SCOPE = {"tw_min": lambda a, b: V(torch.minimum(V._t(a), V._t(b))),
         "tw_max": lambda a, b: V(torch.maximum(V._t(a), V._t(b))),
         **{f"_cast_{k}": _cast(k) for k in ("int", "unsigned", "long", "float")}}


def c_eval(expr: str, env: dict) -> V:
    """Evaluate one expression of the kernel's C subset."""
    py = re.sub(r"\((int|unsigned|unsigned long long|float)\)\(", lambda m: f"_cast_{m.group(1).split()[-1]}(", expr)
    py = re.sub(r"\b(\d+)(?:ull|u)\b", r"\1", py)
    py = re.sub(r"\b(\d+\.\d*(?:e[-+]?\d+)?)f\b", r"\1", py).replace("||", "|")
    assert "?" not in py and "(" + "int)" not in py, py
    out = eval(py, dict(SCOPE), {k: v if isinstance(v, V) else V(v) for k, v in env.items()})  # noqa: S307
    return out if isinstance(out, V) else V(out)


def emulate(anchor, xnode, x: torch.Tensor) -> torch.Tensor:
    """What the kernel computes for `anchor` over `x` (laid out with xnode's strides)."""
    geo = Geometry(anchor, xnode)
    assert tuple(x.stride()) == tuple(xnode.stride) or x.dim() == 0
    n = geo.numel
    env = {"q_t": torch.arange(n)}
    for _, name, expr in geo.coord_decls("unsigned") + geo.window_decls():
        env[name] = c_eval(expr, env).t.expand(n)
    # every output's coordinates land it at q_t of the dense layout in the memory order
    ds = dense_strides(geo.out_shape, geo.order)
    at = sum(env[f"q_c{d}"] * ds[d] for d in range(len(ds)) if geo.out_shape[d] != 1)
    assert torch.equal(at, env["q_t"])
    for d in range(len(ds)):
        if geo.out_shape[d] != 1:
            assert int(env[f"q_c{d}"].max()) == geo.out_shape[d] - 1
    positions, valids = [], []
    na = len(geo.axes)
    for j, ax in enumerate(geo.axes):
        d = ax.dim
        if ax.variable:
            s, e = env[f"q_s{d}"], env[f"q_e{d}"]
            h = s[:, None] + torch.arange(int((e - s).max()))[None, :]
            valid = h < e[:, None]
        else:
            h = c_eval(ax.position(), {f"q_b{d}": env[f"q_b{d}"][:, None], f"q_i{d}": torch.arange(ax.k)[None, :]}).t
            valid = ~c_eval(ax.outside(), {f"q_h{d}": h}).t
            if not ax.checked:
                assert valid.all(), "a window leaves the input where the kernel does not test"
        shape = [n] + [1] * na
        shape[1 + j] = h.shape[1]
        positions.append(torch.where(valid, h, 0).reshape(shape))
        valids.append(valid.reshape(shape))
    win_env = {f"q_c{d}": env[f"q_c{d}"].reshape([n] + [1] * na) for d in range(len(ds)) if f"q_c{d}" in env}
    win_env.update({f"q_h{ax.dim}": p for ax, p in zip(geo.axes, positions)})
    lead, win = geo.offset(tuple(x.shape), tuple(x.stride()), "in", "unsigned")
    offset = c_eval(lead + " + " + win if win else lead, win_env).t
    flat = torch.as_strided(x, (int(offset.max()) + 1,), (1,))
    valid = valids[0]
    for v in valids[1:]:
        valid = valid & v
    vals, valid = torch.broadcast_tensors(flat[offset], valid)  # a size-1 dim's offset has no window term
    dims = tuple(range(1, na + 1))
    if "max" in anchor.op:
        acc = torch.amax(torch.where(valid, vals, float("-inf")), dim=dims)
    else:
        acc = torch.where(valid, vals, 0.0).sum(dim=dims)
    value, empty = geo.value()
    out = c_eval(value, {**env, "q_acc": acc}).t
    if empty is not None:
        out = torch.where(c_eval(empty, env).t, 0.0, out)
    return torch.as_strided(out.to(x.dtype), geo.out_shape, ds)


def _data(shape, channels_last: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel(), generator=g)
    k = max(1, flat.numel() // 50)
    flat[idx[:k]] = float("inf")
    flat[idx[k:2 * k]] = float("-inf")
    flat[idx[2 * k:2 * k + 2]] = float("nan")
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    return x


def _check(fn, x):
    g, s = graphs(lambda self, v: fn(v), x)
    pools = [n for n in s.nodes if n.op in POOL]
    assert len(pools) == 1, s
    anchor = pools[0]
    xnode = s.by_name()[anchor.args[0]]
    assert xnode.op == "input"
    got, want = emulate(anchor, xnode, x), fn(x)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True), (got - want).abs().nan_to_num().max()
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())


def _fixed_cases(count: int, seed: int):
    rnd = random.Random(seed)
    cases = []
    while len(cases) < count:
        d = rnd.choice([1, 2, 2, 3])
        op = rnd.choice(["max", "avg"])
        k = [rnd.randint(1, 4) for _ in range(d)]
        s = [rnd.randint(1, 3) for _ in range(d)]
        dil = [rnd.randint(1, 3) if op == "max" else 1 for _ in range(d)]
        p = [rnd.randint(0, k[i] // 2) for i in range(d)]  # torch allows pad <= kernel / 2
        span = [(k[i] - 1) * dil[i] + 1 for i in range(d)]  # 3-d pools want the input no smaller than that
        sizes = [rnd.randint(span[i] if d == 3 else max(1, span[i] - 2 * p[i]), 13) for i in range(d)]
        lead = rnd.choice([[2, 3], [3], [1, 5]])
        cl = d >= 2 and len(lead) == 2 and rnd.random() < 0.3
        ceil, cip = rnd.random() < 0.5, rnd.random() < 0.5
        div = rnd.choice([None, None, None, 3]) if op == "avg" and d >= 2 else None
        cases.append((op, d, tuple(lead + sizes), k, s, p, dil, ceil, cip, div, cl))
    return cases


def _fixed_fn(op, d, k, s, p, dil, ceil, cip, div):
    if op == "max":
        pool = getattr(F, f"max_pool{d}d")
        return lambda v: pool(v, k, s, p, dil, ceil_mode=ceil)
    pool = getattr(F, f"avg_pool{d}d")
    extra = {"divisor_override": div} if div else {}
    return lambda v: pool(v, k, s, p, ceil_mode=ceil, count_include_pad=cip, **extra)


@pytest.mark.parametrize("case", _fixed_cases(90, 7), ids=lambda c: "-".join(str(x) for x in c).replace(" ", ""))
def test_fixed_windows_match_torch(case):
    op, d, shape, k, s, p, dil, ceil, cip, div, cl = case
    _check(_fixed_fn(op, d, k, s, p, dil, ceil, cip, div), _data(shape, cl, sum(map(ord, str(case)))))


HAND_PICKED = [  # (op, d, shape, kernel, stride, padding, dilation, ceil, count_include_pad, divisor, channels-last)
    ("max", 2, (2, 3, 17, 19), [3, 3], [2, 2], [1, 1], [1, 1], True, True, None, False),  # ResNet stem, odd sizes
    ("max", 2, (2, 4, 8, 8), [3, 3], [2, 2], [1, 1], [1, 1], True, True, None, True),  # channels-last
    ("avg", 2, (2, 3, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1], True, False, None, False),  # last window starts in padding? no
    ("avg", 2, (1, 2, 6, 6), [2, 2], [3, 3], [1, 1], [1, 1], True, True, None, False),  # ceil window clipped to input + pad
    ("avg", 2, (1, 2, 5, 5), [4, 4], [3, 3], [2, 2], [1, 1], True, True, None, False),  # ceil_mode drops the last window
    ("avg", 3, (2, 2, 5, 6, 7), [3, 2, 3], [2, 2, 1], [1, 1, 1], [1, 1, 1], True, False, None, True),
    ("avg", 2, (2, 3, 9, 9), [3, 3], [2, 2], [1, 1], [1, 1], False, True, 5, False),  # divisor_override
    ("max", 3, (1, 2, 9, 10, 11), [2, 3, 2], [2, 1, 3], [1, 1, 0], [3, 2, 1], True, True, None, False),  # dilated 3-d
    ("max", 1, (3, 4, 29), [5], [3], [2], [2], True, True, None, False),
    ("avg", 1, (3, 31), [4], [3], [2], [1], True, False, None, False),  # unbatched 1-d
    ("max", 2, (3, 16, 20), [2, 2], [2, 2], [0, 0], [1, 1], False, True, None, False),  # unbatched 2-d
]


@pytest.mark.parametrize("case", HAND_PICKED, ids=lambda c: "-".join(str(x) for x in c).replace(" ", ""))
def test_hand_picked_windows_match_torch(case):
    op, d, shape, k, s, p, dil, ceil, cip, div, cl = case
    _check(_fixed_fn(op, d, k, s, p, dil, ceil, cip, div), _data(shape, cl, 3))


ADAPTIVE = [  # (op, d, input shape, output size, channels-last)
    ("avg", 2, (2, 3, 15, 17), (5, 5), False), ("avg", 2, (2, 3, 14, 14), (7, 7), False),
    ("max", 2, (2, 3, 15, 17), (4, 6), False), ("avg", 2, (2, 5, 13, 11), (7, 3), True),
    ("max", 2, (2, 5, 7, 9), (1, 1), True),  # global over channels-last stays a pool
    ("avg", 2, (2, 5, 13, 11), (1, 4), False), ("avg", 3, (2, 3, 5, 7, 9), (2, 3, 4), False),
    ("max", 3, (1, 2, 6, 5, 7), (4, 2, 3), True), ("avg", 1, (2, 3, 17), (5,), False),
    ("max", 1, (2, 3, 100), (7,), False), ("avg", 2, (3, 10, 10), (4, 4), False),
    ("avg", 2, (2, 3, 5, 5), (7, 9), False),  # output larger than input: windows overlap
]


@pytest.mark.parametrize("case", ADAPTIVE, ids=lambda c: "-".join(str(x) for x in c).replace(" ", ""))
def test_adaptive_windows_match_torch(case):
    op, d, shape, out, cl = case
    pool = getattr(F, f"adaptive_{op}_pool{d}d")
    _check(lambda v: pool(v, list(out)), _data(shape, cl, 5))


def test_evaluator_refuses_what_c_would_do_differently():
    with pytest.raises(AssertionError):
        c_eval("q_a / 2", {"q_a": torch.tensor([-7])})
    with pytest.raises(AssertionError):
        c_eval("(unsigned)(q_h)", {"q_h": torch.tensor([-1])})
    assert c_eval("tw_min(q_b + 3u, 15) - tw_max(q_b, 0)", {"q_b": torch.tensor([-1, 13])}).t.tolist() == [2, 2]
