"""Pool kernels run on the CPU emulator (tests/emulator.py) against eager: the sweep of
tests/pool_sweep.py (1-d, 2-d, 3-d, max/avg/adaptive, every padding and ceil_mode rule, prologues and
epilogues) in fp32, fp16 and bf16, contiguous and channels-last; and over a hundred pooling settings
(kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override, adaptive sizes,
odd sizes, channels-last, unbatched), each a pool of its own on a model input. Inputs hold NaN and
+-inf. No GPU needed."""
from __future__ import annotations

import copy
import random

import pytest
import torch

from emulator import GXX, emulated_model, mismatch, write_problem
from pool_sweep import SWEEP, sweep_exprs, sweep_source

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _special(t: torch.Tensor, seed: int) -> torch.Tensor:
    """A few NaN, +inf and -inf written over the values (the layout is kept)."""
    g = torch.Generator().manual_seed(seed)
    t = t.clone()
    flat = t.as_strided((t.numel(),), (1,))
    idx = torch.randperm(t.numel(), generator=g)[:12]
    flat[idx] = torch.tensor([float("nan"), float("inf"), float("-inf")] * 4, dtype=t.dtype)
    return t


@pytest.mark.parametrize("dtype,channels_last", [("float32", False), ("float32", True), ("float16", False),
                                                 ("bfloat16", True)])
def test_sweep_on_the_emulator(tmp_path, dtype, channels_last):
    path = write_problem(tmp_path, f"sweep_{dtype}_{int(channels_last)}", sweep_source(dtype, channels_last))
    new_cls, result = emulated_model(path, tmp_path)
    assert sum(k.kind == "pool" for k in result.plan.kernels) >= len(SWEEP) - 3
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    new._tw_general = _no_general_path
    ref32 = copy.deepcopy(ref).float()
    bad = []
    for trial in range(2):
        torch.manual_seed(10 + trial)
        inputs = namespace["get_inputs"]()
        if trial:
            inputs = [_special(t, trial) for t in inputs]
        with torch.no_grad():  # NOTE: fp16/bf16 references run in fp32 (CPU eager lacks some half pools)
            want = [w.to(inputs[0].dtype) for w in ref32(*[t.float() for t in inputs])]
            got = new(*[t.clone() for t in inputs])
        tol = TOL[getattr(torch, dtype)]
        bad += [f"trial {trial} output {i} ({sweep_exprs()[i]}): {m}" for i, (g, w) in enumerate(zip(got, want))
                if (m := mismatch(g, w, tol))]
    assert not bad, "\n".join(bad)


def _no_general_path(*args):
    raise AssertionError("the inputs took the general path: the kernels did not run")


# --- pooling settings, each a pool of a model input ---------------------------------------------

def _fixed_cases(count: int, seed: int):
    """(op, dims, input shape, kernel, stride, padding, dilation, ceil_mode, count_include_pad,
    divisor, channels-last), drawn within what torch accepts."""
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


HAND_PICKED = [
    ("max", 2, (2, 3, 17, 19), [3, 3], [2, 2], [1, 1], [1, 1], True, True, None, False),  # ResNet stem, odd sizes
    ("max", 2, (2, 4, 8, 8), [3, 3], [2, 2], [1, 1], [1, 1], True, True, None, True),  # channels-last
    ("avg", 2, (2, 3, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1], True, False, None, False),
    ("avg", 2, (1, 2, 6, 6), [2, 2], [3, 3], [1, 1], [1, 1], True, True, None, False),  # ceil window clipped to input + pad
    ("avg", 2, (1, 2, 5, 5), [4, 4], [3, 3], [2, 2], [1, 1], True, True, None, False),  # ceil_mode drops the last window
    ("avg", 3, (2, 2, 5, 6, 7), [3, 2, 3], [2, 2, 1], [1, 1, 1], [1, 1, 1], True, False, None, True),
    ("avg", 2, (2, 3, 9, 9), [3, 3], [2, 2], [1, 1], [1, 1], False, True, 5, False),  # divisor_override
    ("max", 3, (1, 2, 9, 10, 11), [2, 3, 2], [2, 1, 3], [1, 1, 0], [3, 2, 1], True, True, None, False),  # dilated 3-d
    ("max", 1, (3, 4, 29), [5], [3], [2], [2], True, True, None, False),
    ("avg", 1, (3, 31), [4], [3], [2], [1], True, False, None, False),  # unbatched 1-d
    ("max", 2, (3, 16, 20), [2, 2], [2, 2], [0, 0], [1, 1], False, True, None, False),  # unbatched 2-d
]
ADAPTIVE = [  # (op, dims, input shape, output size, channels-last)
    ("avg", 2, (2, 3, 15, 17), (5, 5), False), ("avg", 2, (2, 3, 14, 14), (7, 7), False),
    ("max", 2, (2, 3, 15, 17), (4, 6), False), ("avg", 2, (2, 5, 13, 11), (7, 3), True),
    ("max", 2, (2, 5, 7, 9), (1, 1), True),  # global over channels-last stays a pool
    ("avg", 2, (2, 5, 13, 11), (1, 4), False), ("avg", 3, (2, 3, 5, 7, 9), (2, 3, 4), False),
    ("max", 3, (1, 2, 6, 5, 7), (4, 2, 3), True), ("avg", 1, (2, 3, 17), (5,), False),
    ("max", 1, (2, 3, 100), (7,), False), ("avg", 2, (3, 10, 10), (4, 4), False),
    ("avg", 2, (2, 3, 5, 5), (7, 9), False),  # output larger than input: windows overlap
]


def _fixed_expr(v, op, d, k, s, p, dil, ceil, cip, div):
    if op == "max":
        return f"F.max_pool{d}d({v}, {k}, {s}, {p}, {dil}, ceil_mode={ceil})"
    extra = f", divisor_override={div}" if div else ""
    return f"F.avg_pool{d}d({v}, {k}, {s}, {p}, ceil_mode={ceil}, count_include_pad={cip}{extra})"


def _settings(group: str) -> list[tuple[str, tuple, bool]]:
    """(pool expression over `{v}`, input shape, channels-last) of each setting in the group."""
    if group == "adaptive":
        return [(f"F.adaptive_{op}_pool{d}d({{v}}, {list(out)})", shape, cl) for op, d, shape, out, cl in ADAPTIVE]
    cases = _fixed_cases(90, 7) if group == "drawn" else HAND_PICKED
    return [(_fixed_expr("{v}", op, d, k, s, p, dil, ceil, cip, div), shape, cl)
            for op, d, shape, k, s, p, dil, ceil, cip, div, cl in cases]


SETTINGS = """\"\"\"Pools, each of its own input.\"\"\"
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, {args}):
        return ({pools},)


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
"""


def _cl(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)


def _data(shape, channels_last: bool, seed: int) -> torch.Tensor:
    """randn with 2% +inf, 2% -inf and two NaN."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel(), generator=g)
    k = max(1, flat.numel() // 50)
    flat[idx[:k]] = float("inf")
    flat[idx[k:2 * k]] = float("-inf")
    flat[idx[2 * k:2 * k + 2]] = float("nan")
    return _cl(x) if channels_last else x


@pytest.mark.parametrize("group", ["drawn", "hand_picked", "adaptive"])
def test_settings_match_torch(tmp_path, group):
    """Each setting one pool kernel reading its input as given (channels-last or not), its outputs as
    torch's CPU pooling, NaN and inf where torch has them."""
    settings = _settings(group)
    src = SETTINGS.format(
        args=", ".join(f"x{i}" for i in range(len(settings))),
        pools=", ".join(expr.format(v=f"x{i}") for i, (expr, _, _) in enumerate(settings)),
        inputs=", ".join(f"torch.randn({shape})" + (".contiguous(memory_format=torch.channels_last"
                                                     f"{'_3d' if len(shape) == 5 else ''})" if cl else "")
                         for _, shape, cl in settings))
    path = write_problem(tmp_path, f"pools_{group}", src)
    new_cls, result = emulated_model(path, tmp_path)
    nodes = result.plan.graph.by_name()
    pools = [nodes[k.anchor] for k in result.plan.kernels if k.kind == "pool"]
    assert len(pools) == len(settings) and all(nodes[a.args[0]].op == "input" for a in pools), result.plan.kernels
    namespace: dict = {}
    exec(src, namespace)
    new = new_cls()
    new._tw_general = _no_general_path
    inputs = [_data(shape, cl, 3 + i) for i, (_, shape, cl) in enumerate(settings)]
    with torch.no_grad():
        want = namespace["Model"]()(*inputs)
        got = new(*[t.clone() for t in inputs])
    bad = [f"{expr.format(v='x')} over {shape}: {m}" for (expr, shape, _), g, w in zip(settings, got, want)
           if (m := mismatch(g, w, 1e-5, 1e-6))]
    assert not bad, "\n".join(bad)
