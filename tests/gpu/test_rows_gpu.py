"""On a GPU: row kernels (a reduction whose result is broadcast back over its rows, chains of two)
against eager on NaN/inf rows: short rows, rows in registers, rows read again, split rows, rows
along a middle dim, fp16/bf16. The same expressions as tests/test_rows_emu.py, at GPU sizes."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_rows_emu import CHAINS, ROWS, SOURCE, not_rows, special_rows  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _build(tmp_path, exprs: dict, shape: tuple, dim: int, dtype: str):
    body = ", ".join(e.format(d=dim) for group in exprs.values() for e in group)
    keep = tuple(1 if d == dim % len(shape) else s for d, s in enumerate(shape))
    src = SOURCE.format(expr=body, shape=", ".join(map(str, shape)), dtype=dtype, last=shape[-1], keep=keep)
    path = tmp_path / "rows.py"
    path.write_text(src)
    result = compile_problem(load_problem(path))
    out = tmp_path / "rows_new.py"
    out.write_text(result.source)
    return load_module(out, out.read_text(), prefix="tw_rows_gpu"), result, path


@pytest.mark.parametrize("shape,dim,dtype", [
    ((64, 37), -1, "float32"), ((4096, 1024), -1, "float32"), ((1000, 4000), -1, "float32"),
    ((256, 20000), -1, "float32"), ((6, 100000), -1, "float32"), ((65536, 7), -1, "float32"),
    ((16, 96, 3136), 1, "float32"), ((8, 333, 97), 1, "float32"), ((1000, 512), 0, "float32"),
    ((4096, 1536), -1, "float16"), ((2048, 1001), -1, "float16"), ((1024, 2048), -1, "bfloat16"),
])
def test_rows_match_eager(shape, dim, dtype, tmp_path):
    exprs = {**ROWS, **CHAINS}
    module, result, path = _build(tmp_path, exprs, shape, dim, dtype)
    assert not not_rows(result), not_rows(result)  # NOTE: split rows leave standardise's std a lone reduction
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(1)
    ref = namespace["Model"]().cuda()
    new = module.ModelNew().cuda()
    new.load_state_dict(ref.state_dict())
    new._tw_general = None  # NOTE: the kernels must run: a fallback to the original forward would fail here
    torch.manual_seed(0)
    x = special_rows(torch.randn(shape).movedim(dim, -1)).movedim(-1, dim).contiguous()
    x = x.to(getattr(torch, dtype)).cuda()
    with torch.no_grad():
        got, want = new(x.clone()), ref(x.clone())
    torch.cuda.synchronize()
    tol = 1e-4 if dtype == "float32" else 2e-2
    names = [f"{n}[{i}]" for n, group in exprs.items() for i in range(len(group))]
    bad = []
    for name, g, w in zip(names, got, want):
        g, w = g.float(), w.float()
        same = torch.allclose(g, w, atol=tol, rtol=tol, equal_nan=True)
        if not (same and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf())):
            where = (~torch.isclose(g, w, atol=tol, rtol=tol, equal_nan=True)).nonzero()[:4].tolist()
            bad.append(f"{name}: first mismatches at {where}: got {[g[tuple(i)].item() for i in where]}, "
                       f"want {[w[tuple(i)].item() for i in where]}")
    assert not bad, "\n".join(bad)
