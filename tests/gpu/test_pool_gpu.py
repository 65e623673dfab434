"""On a GPU: pool kernels against eager PyTorch. Every problems/pool problem on fresh inputs (with
NaN and +-inf among them where no convolution or matmul runs first), and a sweep of pooling
settings (kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override,
adaptive sizes; 1-d, 2-d, 3-d; fp32, fp16, bf16; contiguous and channels-last) with prologues
and epilogues, each sweep one ModelNew build."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pool_sweep import SWEEP, sweep_exprs, sweep_source
from torchweld.ir import LIBRARY
from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
POOL_PROBLEMS = sorted((ROOT / "problems" / "pool").glob("*.py"))
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _special(t: torch.Tensor, seed: int) -> torch.Tensor:
    """The same values with a few NaN, +inf and -inf written over them (the layout is kept)."""
    g = torch.Generator().manual_seed(seed)
    t = t.clone()  # NOTE: keeps a dense layout (channels-last too), so its storage is t.numel() long
    flat = t.as_strided((t.numel(),), (1,))
    idx = torch.randperm(t.numel(), generator=g)[:9].to(t.device)
    flat[idx] = torch.tensor([float("nan"), float("inf"), float("-inf")] * 3, dtype=t.dtype, device=t.device)
    return t


def _compare(got, want, dtype, name: str) -> list[str]:
    tol = TOL[dtype]
    bad = []
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = g.float(), w.float()
        ok = g.shape == w.shape and torch.allclose(g, w, atol=tol, rtol=tol, equal_nan=True)
        ok = ok and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf())
        if not ok:
            diff = ~torch.isclose(g, w, atol=tol, rtol=tol, equal_nan=True) if g.shape == w.shape else None
            where = diff.nonzero()[:4].tolist() if diff is not None else f"shapes {g.shape} vs {w.shape}"
            bad.append(f"{name} output {i}: first mismatches at {where}")
    return bad


@pytest.mark.parametrize("problem", POOL_PROBLEMS, ids=lambda p: p.stem)
def test_pool_problem_with_special_values(problem, tmp_path):
    prob = load_problem(problem)
    result = compile_problem(prob)
    # NOTE: NaN and inf go only where no library call runs first: cuDNN's Winograd/FFT convolutions
    # smear them over whole tiles, differently for the reference's algorithm and ours.
    library = any(n.target in LIBRARY for n in result.plan.graph.nodes)
    out = tmp_path / "new.py"
    out.write_text(result.source)
    module = load_module(out, out.read_text(), prefix="tw_pool_gpu")
    ref = prob.build_model(seed=0).cuda()
    new = module.ModelNew(*prob.init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    new._tw_general = _no_general_path
    bad = []
    for trial in range(3):
        torch.manual_seed(100 + trial)
        inputs = [t.cuda() for t in prob.inputs()]
        if trial and not library:  # trial 0: plain random inputs; then NaN and inf among them
            inputs = [_special(t, trial) if t.is_floating_point() else t for t in inputs]
        with torch.no_grad():
            want = ref(*[t.clone() for t in inputs])
            got = new(*[t.clone() for t in inputs])
        torch.cuda.synchronize()
        want, got = (want,) if isinstance(want, torch.Tensor) else want, (got,) if isinstance(got, torch.Tensor) else got
        bad += _compare(got, want, inputs[0].dtype, f"trial {trial}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("dtype,channels_last", [("float32", False), ("float32", True), ("float16", False),
                                                 ("bfloat16", True)])
def test_pool_sweep_matches_eager(dtype, channels_last, tmp_path):
    path = tmp_path / f"sweep_{dtype}_{int(channels_last)}.py"
    path.write_text(sweep_source(dtype, channels_last))
    prob = load_problem(path)
    result = compile_problem(prob)
    assert sum(k.kind == "pool" for k in result.plan.kernels) >= len(SWEEP) - 3  # global ones may be reductions
    out = tmp_path / "new.py"
    out.write_text(result.source)
    module = load_module(out, out.read_text(), prefix="tw_pool_sweep")
    ref = prob.build_model(seed=0).cuda()
    new = module.ModelNew().cuda()
    new.load_state_dict(ref.state_dict())
    new._tw_general = _no_general_path
    bad = []
    for trial in range(3):
        torch.manual_seed(200 + trial)
        inputs = [t.cuda() for t in prob.inputs()]
        if trial:
            inputs = [_special(t, trial) for t in inputs]
        with torch.no_grad():
            want = ref(*[t.clone() for t in inputs])
            got = new(*[t.clone() for t in inputs])
        torch.cuda.synchronize()
        bad += _compare(got, want, getattr(torch, dtype), f"trial {trial}")
    assert not bad, "\n".join(bad) + "\n" + "\n".join(f"output {i}: {e}" for i, e in enumerate(sweep_exprs()))


def _no_general_path(*args):
    raise AssertionError("the inputs took the general path: the kernels did not run")
