"""Pool kernels run on the CPU emulator (tests/emulator.py: the emitted CUDA source built by g++,
one std::thread per GPU thread) against eager: the sweep of tests/pool_sweep.py (1-d, 2-d, 3-d,
max/avg/adaptive, every padding and ceil_mode rule, prologues and epilogues) in fp32, fp16 and
bf16, contiguous and channels-last, on inputs holding NaN and +-inf. No GPU needed."""
from __future__ import annotations

import copy

import pytest
import torch

from emulator import GXX, emulated_model, write_problem
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
        for i, (g, w) in enumerate(zip(got, want)):
            g, w = g.float(), w.float()
            ok = g.shape == w.shape and torch.allclose(g, w, atol=tol, rtol=tol, equal_nan=True)
            if not (ok and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf())):
                where = (~torch.isclose(g, w, atol=tol, rtol=tol, equal_nan=True)).nonzero()[:3].tolist() \
                    if g.shape == w.shape else f"shape {tuple(g.shape)} vs {tuple(w.shape)}"
                bad.append(f"trial {trial} output {i} ({sweep_exprs()[i]}): at {where}")
    assert not bad, "\n".join(bad)


def _no_general_path(*args):
    raise AssertionError("the inputs took the general path: the kernels did not run")
