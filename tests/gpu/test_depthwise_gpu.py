"""On a GPU: depthwise convolution kernels against eager PyTorch. Every depthwise corpus problem on
fresh inputs (its kernel must run, not the general path), a sweep of shapes built as one model per
dtype group (one build each), NaN/inf inputs, inputs in other layouts, and another kernel size."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = sorted(ROOT.glob("problems/*/dwconv*.py")) + [ROOT / "problems/conv/conv2d_depthwise_silu_residual.py"]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}

# (conv constructor, input shape, output expression of {c} (the conv's output) and {x} (its input)), by group.
SWEEP = {
    "fp32": [
        ("nn.Conv2d(16, 16, 3, padding=1, groups=16)", (2, 16, 33, 47), "torch.relu({c})"),
        ("nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16, bias=False)", (2, 16, 57, 64), "{c}"),
        ("nn.Conv2d(8, 16, 5, padding=2, groups=8)", (2, 8, 31, 29), "F.gelu({c})"),
        ("nn.Conv2d(16, 16, 5, padding=4, dilation=2, groups=16)", (2, 16, 40, 40), "{x} + F.gelu({c})"),
        ("nn.Conv2d(32, 32, 7, padding=3, groups=32)", (2, 32, 56, 56), "{x} + F.silu({c})"),
        ("nn.Conv2d(8, 8, 7, stride=2, padding=3, groups=8)", (2, 8, 115, 117), "torch.sigmoid({c})"),
        ("nn.Conv2d(8, 16, 3, dilation=2, groups=8)", (1, 8, 20, 20), "torch.tanh({c}) * 2.0"),
        ("nn.Conv2d(8, 8, 1, groups=8)", (2, 8, 9, 9), "{c} - {x}"),
        ("nn.Conv2d(8, 8, (3, 5), stride=(1, 2), padding=(1, 2), dilation=(2, 1), groups=8)", (2, 8, 17, 19),
         "F.elu({c})"),
        ("nn.Conv2d(8, 8, 9, padding=4, groups=8)", (2, 8, 30, 34), "torch.relu({c}) + {x}"),  # weights in shared memory
        ("nn.Conv2d(4, 8, 11, stride=2, padding=5, groups=4)", (2, 4, 45, 47), "{c}"),
        ("nn.Conv2d(4, 4, 3, padding=1, groups=4)", (1, 4, 224, 224), "F.hardswish({c})"),  # tiles across and down
        ("nn.Conv2d(96, 96, 3, padding=1, groups=96)", (4, 96, 7, 7), "F.relu6({c})"),  # planes share blocks
        ("nn.Conv2d(64, 64, 3, padding=1, groups=64)", (8, 64, 14, 14), "F.silu({c})"),
        ("nn.Conv2d(8, 8, 3, padding=2, groups=8)", (2, 8, 33, 20), "F.silu({c}[:, :, 1:-1, :-2])"),  # a window
        ("nn.Conv1d(64, 64, 4, padding=3, groups=64)", (2, 64, 500), "F.silu({c}[..., :500])"),  # causal
        ("nn.Conv1d(32, 32, 31, padding=15, groups=32)", (2, 32, 777), "F.silu({c})"),
        ("nn.Conv1d(16, 32, 3, stride=2, padding=1, groups=16)", (2, 16, 301), "{c}"),
        ("nn.Conv1d(8, 8, 65, padding=32, groups=8)", (1, 8, 1000), "torch.relu({c})"),
        ("nn.Conv1d(16, 16, 5, padding=6, dilation=3, groups=16)", (2, 16, 123), "{x} * {c}"),
    ],
    "lowp": [
        ("nn.Conv2d(64, 64, 3, padding=1, groups=64, dtype=torch.float16)", (4, 64, 28, 28), "F.silu({c})"),
        ("nn.Conv1d(64, 64, 4, padding=3, groups=64, dtype=torch.float16)", (2, 64, 300), "F.silu({c}[..., :300])"),
        ("nn.Conv2d(32, 32, 7, padding=3, groups=32, dtype=torch.float16)", (2, 32, 56, 56), "{x} + F.silu({c})"),
        ("nn.Conv2d(32, 32, 5, stride=2, padding=2, groups=32, dtype=torch.bfloat16)", (2, 32, 64, 64),
         "torch.relu({c})"),
        ("nn.Conv1d(32, 32, 31, padding=15, groups=32, dtype=torch.bfloat16)", (2, 32, 256), "F.silu({c})"),
    ],
    "special": [  # NaN and inf in the inputs, which the convolution reads first
        ("nn.Conv2d(16, 16, 3, padding=1, groups=16)", (2, 16, 33, 47), "{x} + torch.relu({c})"),
        ("nn.Conv2d(8, 8, 7, stride=2, padding=3, groups=8)", (2, 8, 40, 41), "torch.sigmoid({c})"),
        ("nn.Conv1d(64, 64, 4, padding=3, groups=64)", (2, 64, 500), "F.silu({c}[..., :500])"),
        ("nn.Conv2d(8, 8, 9, padding=4, groups=8)", (2, 8, 30, 34), "{c}"),
    ],
}

SOURCE = '''"""Depthwise convolutions of the GPU sweep, one per input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([
            {convs}
        ])

    def forward(self, {args}):
        return ({outs},)


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


def _dtype(ctor: str) -> torch.dtype:
    return torch.bfloat16 if "bfloat16" in ctor else torch.float16 if "float16" in ctor else torch.float32


def _source(cases) -> str:
    outs = [expr.format(c=f"self.convs[{i}](x{i})", x=f"x{i}") for i, (_, _, expr) in enumerate(cases)]
    return SOURCE.format(convs=",\n            ".join(c for c, _, _ in cases),
                         args=", ".join(f"x{i}" for i in range(len(cases))), outs=", ".join(outs),
                         inputs=", ".join(f"torch.randn({shape}, dtype={str(_dtype(c))})" for c, shape, _ in cases))


def _build(path: Path, out_dir: Path, init=None):
    """(problem, reference, ModelNew with the reference's weights, plan), both on the GPU."""
    problem = load_problem(path)
    result = compile_problem(problem)
    out = out_dir / f"{path.stem}_new.py"
    out.write_text(result.source)
    module = load_module(out, out.read_text(), prefix="tw_dw_gpu")
    init = problem.init_inputs() if init is None else init
    torch.manual_seed(0)
    ref = problem.model_cls(*init).cuda()
    new = module.ModelNew(*init).cuda()
    new.load_state_dict(ref.state_dict())
    return problem, ref, new, result.plan


def _sweep(group: str, tmp_path: Path):
    path = tmp_path / f"sweep_{group}.py"
    path.write_text(_source(SWEEP[group]))
    return _build(path, tmp_path)


def _never_general(new):
    def fail(*args):
        raise AssertionError("the general path ran: the depthwise kernel was not used")
    new._tw_general = fail


def _compare(got, want, special: bool = False) -> list[str]:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    bad = []
    for i, (g, w) in enumerate(zip(got, want)):
        tol = TOL[w.dtype]
        g, w = g.float(), w.float()
        ok = g.shape == w.shape and torch.allclose(g, w, atol=tol, rtol=tol, equal_nan=True)
        if ok and special:
            ok = torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf())
        if not ok:
            if g.shape != w.shape:
                bad.append(f"output {i}: shape {tuple(g.shape)}, want {tuple(w.shape)}")
                continue
            where = (~torch.isclose(g, w, atol=tol, rtol=tol, equal_nan=True)).nonzero()[:3].tolist()
            bad.append(f"output {i} {tuple(w.shape)}: first mismatches at {where}: got "
                       f"{[g[tuple(j)].item() for j in where]}, want {[w[tuple(j)].item() for j in where]}")
    return bad


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_problem_matches_eager(path, tmp_path):
    problem, ref, new, plan = _build(path, tmp_path)
    assert any(k.kind == "depthwise" for k in plan.kernels)
    _never_general(new)
    for seed in range(3):
        torch.manual_seed(100 + seed)
        inputs = [t.cuda() for t in problem.inputs()]
        with torch.no_grad():
            bad = _compare(new(*[t.clone() for t in inputs]), ref(*inputs))
        assert not bad, f"seed {seed}: " + "\n".join(bad)


def _special(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A few NaN, +inf, -inf and huge values at random places (on one plane several)."""
    flat = t.view(-1)
    idx = torch.randperm(flat.numel(), generator=gen)[:12]
    flat[idx] = torch.tensor([float("nan"), float("inf"), float("-inf"), 3e38, -3e38, float("inf")] * 2,
                             dtype=t.dtype)
    flat[5:9] = float("inf")  # neighbours on the first plane's first row
    return t


@pytest.mark.parametrize("group", sorted(SWEEP))
def test_sweep_matches_eager(group, tmp_path):
    cases = SWEEP[group]
    problem, ref, new, plan = _sweep(group, tmp_path)
    assert sum(k.kind == "depthwise" for k in plan.kernels) == len(cases)
    _never_general(new)
    gen = torch.Generator().manual_seed(7)
    for seed in range(2):
        torch.manual_seed(200 + seed)
        inputs = problem.inputs()
        if group == "special":
            inputs = [_special(t, gen) for t in inputs]
        inputs = [t.cuda() for t in inputs]
        with torch.no_grad():
            bad = _compare(new(*[t.clone() for t in inputs]), ref(*inputs), special=group == "special")
        assert not bad, f"seed {seed}:\n" + "\n".join(f"{cases[int(b.split()[1])][0]}: {b}" for b in bad)


def test_inputs_in_other_layouts(tmp_path):
    """Channels-last and transposed inputs have the captured shapes: the kernel reads them made contiguous."""
    problem, ref, new, _ = _sweep("fp32", tmp_path)
    _never_general(new)
    torch.manual_seed(300)
    inputs = []
    for t in problem.inputs():
        t = t.cuda()
        inputs.append(t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else
                      t.transpose(1, 2).contiguous().transpose(1, 2))
    with torch.no_grad():
        bad = _compare(new(*inputs), ref(*inputs))
    assert not bad, "\n".join(bad)


def test_another_kernel_size_takes_the_general_path(tmp_path):
    """ModelNew built with kernel_size 5 (the kernel was built for 7): its weight's shape differs, so
    forward runs the original code, and is right."""
    path = ROOT / "problems/conv/conv2d_depthwise_silu_residual.py"
    problem, ref, new, _ = _build(path, tmp_path, init=[256, 5])
    torch.manual_seed(400)
    inputs = [t.cuda() for t in problem.inputs()]
    with torch.no_grad():
        assert not _compare(new(*inputs), ref(*inputs))
