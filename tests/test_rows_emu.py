"""Row kernels (a reduction whose result is broadcast back over its rows, in one kernel) run on the
CPU emulator (tests/emulator.py) against eager: rows kept in registers or read again, odd row
lengths (no vector build), vector and scalar builds, rows over a middle dim, split rows, chains of
two reductions, fp16/bf16 with fp32 math, and rows of NaN and inf."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, mismatch, write_problem
from torchweld.codegen.registry import generator

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

SOURCE = '''"""Emulator test model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand({last}, dtype=torch.{dtype}) + 0.5)
        self.g = nn.Parameter(torch.rand({keep}, dtype=torch.{dtype}) + 0.5)

    def forward(self, x):
        return ({expr},)


def get_inputs():
    return [torch.randn({shape}, dtype=torch.{dtype})]


def get_init_inputs():
    return []
'''
# name -> the expressions a model returns, over dim {d}; self.w has the last dim's size, self.g the
# reduced (keepdim) shape
ROWS = {
    "center": ["x - x.mean({d}, keepdim=True)"],
    "sum_normalise": ["(x.abs() + 1.0) / (x.abs() + 1.0).sum({d}, keepdim=True)"],
    "max_shift": ["x - x.amax({d}, keepdim=True)"],
    "log_softmax": ["x - torch.logsumexp(x, {d}, keepdim=True)"],
    "rmsnorm": ["x * torch.rsqrt((x * x).mean({d}, keepdim=True) + 1e-6) * self.w"],
    "l2": ["x / x.norm(dim={d}, keepdim=True)"],
    "min_also_returned": ["(m := x.amin({d}, keepdim=True)) * self.g", "x - m"],
    "sum_returned": ["(t := (torch.sigmoid(x) + 0.5).sum({d}, keepdim=True))", "x / t"],
    "above_mean": ["x > x.mean({d}, keepdim=True)"],  # a bool output
}
CHAINS = {
    "softmax": ["(e := torch.exp(x - x.amax({d}, keepdim=True))) / e.sum({d}, keepdim=True)"],
    "layer_norm": ["(c := x - x.mean({d}, keepdim=True)) * torch.rsqrt((c * c).mean({d}, keepdim=True) + 1e-5)"],
    "standardise": ["(x - x.mean({d}, keepdim=True) * self.g) / x.std({d}, keepdim=True)"],
    "var_mean": ["(x - (vm := torch.var_mean(x, {d}, keepdim=True))[1]) * torch.rsqrt(vm[0] + 1e-5)"],
}


def special_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows (along the last dim) of -inf, one +inf, one NaN, -inf among finite values, two +inf, a
    finite row, +inf: as many of these as there are rows."""
    x = x.contiguous().clone()
    inf, nan = float("inf"), float("nan")
    rows = x.view(-1, x.shape[-1])
    n = rows.shape[1]
    fills = [lambda r: r.fill_(-inf), lambda r: r.__setitem__(3 % n, inf), lambda r: r.__setitem__(5 % n, nan),
             lambda r: r.__setitem__(slice(None, None, 2), -inf), lambda r: r.__setitem__([0, n - 1], inf),
             lambda r: None, lambda r: r.fill_(inf)]
    for row, fill in zip(rows, fills):
        fill(row)
    return x


def run(tmp_path, exprs: dict, shape: tuple, dim: int = -1, dtype: str = "float32", vec: bool = True,
        special: bool = True):
    """Compile one model returning every expr over `dim`, run it on the emulator: the mismatches and the plan."""
    body = ", ".join(e.format(d=dim) for group in exprs.values() for e in group)
    keep = tuple(1 if d == dim % len(shape) else s for d, s in enumerate(shape))
    src = SOURCE.format(expr=body, shape=", ".join(map(str, shape)), dtype=dtype, last=shape[-1], keep=keep)
    path = write_problem(tmp_path, f"r{abs(hash((body, shape, dtype)))}", src)
    new_cls, result = emulated_model(path, tmp_path, vec=vec)
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    x = torch.randn(shape)
    if special:
        x = special_rows(x.movedim(dim, -1)).movedim(-1, dim).contiguous()
    x = x.to(getattr(torch, dtype))
    torch.manual_seed(1)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    new._tw_general = None  # NOTE: the kernels must run: a fallback to the original forward would fail here
    with torch.no_grad():
        want = ref(x.clone())
        got = new(x.clone())
    tol = 1e-4 if dtype == "float32" else 2e-2
    names = [f"{name}[{i}]" for name, group in exprs.items() for i in range(len(group))]
    assert len(names) == len(want) == len(got)
    bad = [f"{name}: {m}" for name, g, w in zip(names, got, want) if (m := mismatch(g, w, tol))]
    return bad, result


def row_kernels(result) -> list:
    """(anchors, layout, cache) of each reduce kernel."""
    nodes = result.plan.graph.by_name()
    out = []
    for k in result.plan.kernels:
        if k.kind == "reduce":
            g = generator(k, nodes)
            out.append(([nodes[m].op for m in k.nodes if nodes[m].is_anchor], g.L, getattr(g, "cache", None)))
    return out


def not_rows(result) -> list[str]:
    """Reduce kernels of a ROWS/CHAINS model that are neither row kernels nor a chain's lone reduction.

    NOTE: split rows fuse no chain; standardise's std then runs alone (no prologue, no epilogue: a
    plain reduce kernel) and the mean's row kernel reads it. Every other reduce kernel is a row kernel.
    """
    nodes = result.plan.graph.by_name()
    bad = []
    for k in result.plan.kernels:
        if k.kind != "reduce":
            continue
        g = generator(k, nodes)
        if not (g.rows or (g.L.split > 1 and tuple(k.nodes) == (k.anchor,))):
            bad.append(f"{k.name}: {nodes[k.anchor].op} of {tuple(k.shape)} with {list(k.nodes)}, split {g.L.split}")
    return bad


@pytest.mark.parametrize("cols,vec", [(37, True), (1024, True), (1000, False)])
def test_rows(tmp_path, cols, vec):
    """Short odd rows (no vector build), rows in registers in vector and scalar builds."""
    bad, result = run(tmp_path, {**ROWS, **CHAINS}, (24, cols), vec=vec)
    assert not bad, "\n".join(bad)
    kernels = row_kernels(result)
    assert len(kernels) == len(ROWS) + len(CHAINS)
    assert all(cache for _, _, cache in kernels)  # every row read once
    assert sum(len(anchors) == 2 for anchors, _, _ in kernels) == 3  # var_mean is one anchor


def test_rows_long(tmp_path):
    """Rows of 20000: a thread's share is more than the register cache holds; each pass reads again."""
    exprs = {k: ROWS[k] for k in ("rmsnorm", "min_also_returned")} | CHAINS
    bad, result = run(tmp_path, exprs, (7, 20000))
    assert not bad, "\n".join(bad)
    kernels = row_kernels(result)
    assert len(kernels) == len(exprs) and any(len(anchors) == 2 for anchors, _, _ in kernels)
    assert not any(cache for _, _, cache in kernels)


def test_rows_split(tmp_path):
    """3 rows of 33000 (the layout of 6 rows of 100000: 256 threads a row, 16-byte loads, 16 blocks
    a row): one reduction splits over blocks (partials, then a kernel that merges and writes); a
    chain is not fused there (it could not split) and runs as two kernels, standardise's std a lone
    reduction."""
    bad, result = run(tmp_path, {**ROWS, **CHAINS}, (3, 33000))
    assert not bad, "\n".join(bad)
    kernels = row_kernels(result)
    assert all(L.split > 1 and L.rm and L.vec == 4 and L.tx == 1 for _, L, _ in kernels)
    assert all(len(anchors) == 1 for anchors, _, _ in kernels)
    assert not not_rows(result), not_rows(result)
    assert sum(cache is None for _, _, cache in kernels) == 1  # the std


@pytest.mark.parametrize("shape,dim", [((512, 40), 0), ((2, 600, 20), 1)])
def test_columns_split(tmp_path, shape, dim):
    """Few long columns (as a dim-0 reduction of (1000, 512)): threads along the inner dim, each
    column split over blocks, the last tile of columns part empty; chains unfused as for split rows."""
    bad, result = run(tmp_path, {**ROWS, **CHAINS}, shape, dim=dim)
    assert not bad, "\n".join(bad)
    kernels = row_kernels(result)
    assert all(L.split > 1 and not L.rm for _, L, _ in kernels)
    assert not not_rows(result), not_rows(result)


@pytest.mark.parametrize("shape,dim", [((4, 33, 7), 1), ((6, 5, 9), 0), ((3, 40, 70), 1)])
def test_middle_dim(tmp_path, shape, dim):
    """Rows along a strided dim (threads along the inner dim), and a dim-0 reduction."""
    bad, result = run(tmp_path, {**ROWS, **CHAINS}, shape, dim=dim)
    assert not bad, "\n".join(bad)
    kernels = row_kernels(result)
    assert len(kernels) == len(ROWS) + len(CHAINS) and not any(L.rm for _, L, _ in kernels)


@pytest.mark.parametrize("dtype,cols", [("float16", 512), ("float16", 37), ("bfloat16", 256)])
def test_low_precision(tmp_path, dtype, cols):
    """fp16/bf16 storage, fp32 math: 8-wide vectors where the row allows, two cached values."""
    exprs = {k: ROWS[k] for k in ("center", "log_softmax", "rmsnorm", "l2")} | CHAINS
    bad, result = run(tmp_path, exprs, (16, cols), dtype=dtype)
    assert not bad, "\n".join(bad)
    kernels = row_kernels(result)
    assert len(kernels) == len(exprs)
    if cols % 8 == 0:
        assert all(L.vec == 8 for _, L, _ in kernels)
