"""On a GPU: reduce kernels against eager on NaN/inf rows, and training-mode batch norm's running
statistics (a ModelNew must leave its buffers as the reference leaves its own)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchweld.judge.first import fp32_mode
from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
BN_PROBLEMS = sorted(p for p in (ROOT / "problems" / "norm").glob("*batchnorm*.py")) + [
    ROOT / "problems" / "norm" / "instance_norm1d_tracked_relu.py"]

SOURCE = '''"""Every reduction of EXPRS at once."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ({expr},)


def get_inputs():
    return [torch.randn({rows}, {cols})]


def get_init_inputs():
    return []
'''
EXPRS = {
    "softmax": "torch.softmax(x * 2.0, dim=-1) + 1.0",
    "log_softmax": "F.log_softmax(x, dim=-1)",
    "softmax_dim0": "torch.softmax(x, dim=0)",
    "logsumexp": "torch.logsumexp(x, dim=-1)",
    "amax": "torch.amax(x, dim=-1)",
    "amin": "torch.amin(x, dim=0)",
    "sum": "torch.sum(x, dim=-1)",
    "mean": "torch.mean(x, dim=0)",
    "layer_norm": "F.layer_norm(x, (x.shape[-1],))",
    "max_values": "torch.max(x, dim=-1)[0] * 2.0",
    "max_indices": "torch.max(x, dim=-1)[1]",
    "min_values_dim0": "torch.min(x, dim=0)[0]",
    "argmax": "torch.argmax(x, dim=1)",
    "argmin_dim0": "torch.argmin(x * 2.0, dim=0, keepdim=True)",
    "argmax_flat": "torch.argmax(x)",
    "prod": "torch.prod(x * 0.1 + 1.0, dim=-1)",
    "l2": "torch.norm(x, dim=-1)",
    "l1_dim0": "torch.linalg.vector_norm(x, ord=1, dim=0)",
    "linf": "torch.linalg.vector_norm(x, ord=float('inf'), dim=-1)",
    "var": "torch.var(x, dim=-1)",
    "std_dim0": "torch.std(x, dim=0, correction=0)",
    "var_mean_var": "torch.var_mean(x, dim=-1)[0]",
    "var_mean_mean": "torch.var_mean(x, dim=-1)[1] + 1.0",
    "l2_normalize": "x / x.norm(dim=1, keepdim=True)",
    "cumsum": "torch.cumsum(x, dim=-1) * 2.0",
    "cumsum_dim0": "torch.cumsum(x + 1.0, dim=0)",
}


def _special_rows(rows: int, cols: int) -> torch.Tensor:
    x = torch.randn(rows, cols)
    inf, nan = float("inf"), float("nan")
    x[0] = -inf  # a row of -inf
    x[1, 3] = inf  # one +inf
    x[2, 5] = nan  # one NaN
    x[3, ::2] = -inf  # -inf among finite values
    x[4, 1], x[4, 6] = inf, inf  # two +inf
    x[5, 0] = -inf  # -inf first
    x[6] = inf  # a row of +inf
    return x


def _build(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    out = tmp_path / f"{name}_new.py"
    out.write_text(compile_problem(load_problem(path)).source)
    return load_module(out, out.read_text(), prefix="tw_reduce_gpu").ModelNew()


@pytest.mark.parametrize("rows,cols,special", [(64, 37, True), (64, 1024, True), (9, 40000, True), (2, 262144, False),
                                               (2100, 9, False), (65536, 7, True)])
def test_special_values_match_eager(rows, cols, special, tmp_path):
    """One model returns every op of EXPRS (one build); each output compared with eager's. Short rows
    (several a warp), rows kept in registers, rows split over blocks, a long dim 0 split over blocks.
    Without special values the check is bitwise on indices and allclose elsewhere."""
    model = _build(tmp_path, f"special_{rows}_{cols}", SOURCE.format(expr=", ".join(EXPRS.values()), rows=rows, cols=cols))
    model = model.cuda()
    torch.manual_seed(rows + cols)
    x = (_special_rows(rows, cols) if special else torch.randn(rows, cols)).cuda()
    with torch.no_grad():
        got = model(x)
        want = model._tw_general(x)
    torch.cuda.synchronize()
    bad = []
    for name, g, w in zip(EXPRS, got, want):
        if not w.dtype.is_floating_point:
            if not torch.equal(g, w):
                bad.append(f"{name}: indices differ at {(g != w).nonzero()[:4].tolist()}")
            continue
        if special and name == "var_mean_mean":
            # NOTE: eager's Welford mean on a row holding an infinity is NaN or the infinity depending on
            # the order its threads combine (a 7-wide row gave inf for +inf at col 3, NaN for -inf at col 0):
            # only the finite rows are compared; a non-finite row must stay non-finite
            finite = torch.isfinite(w)
            if torch.isfinite(g[~finite]).any():
                bad.append(f"{name}: a row whose eager mean is not finite got a finite mean")
                continue
            g, w = g[finite], w[finite]
        # NOTE: a long cumsum's fp32 error grows with its length: compare against float64 there
        tol = 1e-4 if "cumsum" not in name or cols < 2000 else 1e-3
        same = torch.allclose(g, w, atol=tol, rtol=tol, equal_nan=True)
        if not (same and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf())):
            where = (~torch.isclose(g, w, atol=1e-4, rtol=1e-4, equal_nan=True)).nonzero()[:4].tolist()
            bad.append(f"{name}: first mismatches at {where}: got {[g[tuple(i)].item() for i in where]}, "
                       f"want {[w[tuple(i)].item() for i in where]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("problem", BN_PROBLEMS, ids=lambda p: p.stem)
def test_batch_norm_running_stats(problem, tmp_path):
    # NOTE: in strict fp32, as the judge runs: under cuDNN's default TF32 a convolution run channels-last
    # with the batch norm folded into its weights and eager's NCHW one round their operands differently
    with fp32_mode(False):
        _batch_norm_running_stats(problem, tmp_path)


def _batch_norm_running_stats(problem, tmp_path):
    prob = load_problem(problem)
    out = tmp_path / "new.py"
    out.write_text(compile_problem(prob).source)
    module = load_module(out, out.read_text(), prefix="tw_bn_gpu")
    ref = prob.build_model(seed=0).cuda()
    torch.manual_seed(0)
    new = module.ModelNew(*prob.init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    for step in range(2):
        torch.manual_seed(50 + step)
        inputs = [t.cuda() for t in prob.inputs()]
        with torch.no_grad():
            want = ref(*[t.clone() for t in inputs])
            got = new(*[t.clone() for t in inputs])
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    for (name, a), b in zip(ref.state_dict().items(), new.state_dict().values()):
        assert torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4), name
    ref.eval(), new.eval()  # the other mode takes the original forward
    with torch.no_grad():
        assert torch.allclose(new(*inputs), ref(*inputs), atol=1e-4, rtol=1e-4)


INSTANCE = ROOT / "tests" / "gpu" / "instance_norms.txt"  # a problem source with {extra} in its constructor


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_instance_norms(mode, tmp_path):
    """InstanceNorm1d/2d/3d, affine or not, tracked or not, in both modes: outputs and buffers as eager's."""
    source = INSTANCE.read_text().replace("{extra}", "self.eval()" if mode == "eval" else "pass")
    path = tmp_path / f"inorm_{mode}.py"
    path.write_text(source)
    prob = load_problem(path)
    out = tmp_path / "new.py"
    out.write_text(compile_problem(prob).source)
    module = load_module(out, out.read_text(), prefix="tw_in_gpu")
    ref = prob.build_model(seed=0).cuda()
    with torch.no_grad():
        for name, b in ref.named_buffers():
            if "running" in name:
                b.uniform_(0.5, 1.5)
    new = module.ModelNew().cuda()
    new.load_state_dict(ref.state_dict())
    new.train(ref.training)
    for step in range(2):
        torch.manual_seed(60 + step)
        inputs = [t.cuda() * 2.0 + 1.0 for t in prob.inputs()]
        with torch.no_grad():
            want = ref(*[t.clone() for t in inputs])
            got = new(*[t.clone() for t in inputs])
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.allclose(g, w, atol=1e-4, rtol=1e-4), (step, i, float((g - w).abs().max()))
    for (name, a), b in zip(ref.state_dict().items(), new.state_dict().values()):
        assert torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4), name
