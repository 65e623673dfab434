"""Training safety: forward's guard sends every call autograd would record to the original forward
(statically on every corpus file, through tests/test_corpus_compile.py's compiles; on the CPU emulator,
gradients and running statistics as eager's)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from emulator import GXX, emulated_model, write_problem
from torchweld.pipeline import compile_problem
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = sorted(p for p in (ROOT / "problems").rglob("*.py") if p.name != "__init__.py")


def forward_guard(source: str) -> tuple[str, dict[str, str]]:
    """(the condition of ModelNew.forward's guard, {local name: parameter path} of the fetches before it)."""
    fwd = source.split("\nclass ModelNew", 1)[1].split("    def forward(", 1)[1]  # NOTE: helper classes come first
    fetched = dict(re.findall(r"^        (p\d+) = self\..*  # self\.([\w.]+)$", fwd.split("        if (", 1)[0], re.M))
    cond = fwd.split("        if (", 1)[1].split("):\n            return self._tw_general(", 1)[0]
    return cond, fetched


def check_grad_guard(problem: Path, result) -> None:
    """Every tensor input and every parameter forward reads is checked for requires_grad in grad mode.

    NOTE: called by tests/test_corpus_compile.py for every corpus file, on the compile it makes anyway."""
    graph = result.plan.graph
    cond, fetched = forward_guard(result.source)
    grad = cond.split("torch.is_grad_enabled() and (", 1)
    assert len(grad) == 2, f"{problem.name}: the guard never looks at grad mode:\n{cond}"
    checked = set(re.findall(r"([\w.'\[\]]+)\.requires_grad", grad[1]))
    want = {n.target for n in graph.nodes if n.op == "input" and n.attr("value") is None}
    named = {fetched.get(c, c) for c in checked}
    named |= {".".join(re.findall(r"\['(\w+)'\]", c)) for c in checked if c.startswith("self.")}
    want |= {n.target for n in graph.nodes if n.op == "param" and "float" in n.dtype}
    assert want <= named, f"{problem.name}: not checked for requires_grad: {sorted(want - named)}"
    if any(n.op == "input" and n.attr("value") is None for n in graph.nodes):  # the fallback says why, once
        assert '_tw_shape_note(self, ((' in result.source and "Specialised dims: " in result.source


@pytest.mark.parametrize("name", ["matmul/linear_relu", "norm/linear_batchnorm1d_train_tanh", "models/convnext_block"])
def test_guard_checks_grad_mode(name):
    """A few corpus files here (all of them in test_corpus_compile); a guard that forgets one fails."""
    problem = ROOT / "problems" / f"{name}.py"
    result = compile_problem(load_problem(problem))
    check_grad_guard(problem, result)
    broken = result.source.replace(" or p0.requires_grad", "", 1)
    assert broken != result.source
    with pytest.raises(AssertionError, match="not checked for requires_grad"):
        check_grad_guard(problem, type(result)(**{**result.__dict__, "source": broken}))


MLP = '''"""Linear, then a pointwise chain with a parameter; a batch norm in training mode."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 48)
        self.scale = nn.Parameter(torch.rand(48) + 0.5)
        self.bn = nn.BatchNorm1d(48)

    def forward(self, x):
        return torch.tanh(self.bn(torch.relu(self.fc(x)) * self.scale + 0.25))


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grad")
    path = write_problem(tmp, "mlp_grad", MLP)
    new_cls, result = emulated_model(path, tmp)
    assert result.plan.kernels
    namespace: dict = {}
    exec(MLP, namespace)
    return namespace["Model"], new_cls


def _pair(mlp):
    model_cls, new_cls = mlp
    torch.manual_seed(0)
    ref = model_cls()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    return ref, new


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_training_steps_take_the_original_path(mlp):
    """Three SGD steps through both: the same losses, gradients, weights and running statistics."""
    ref, new = _pair(mlp)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, new)]
    for step in range(3):
        torch.manual_seed(step)
        x = torch.randn(16, 32)
        losses = []
        for m, opt in zip((ref, new), opts):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-6), step
        for (name, a), b in zip(ref.named_parameters(), new.parameters()):
            assert b.grad is not None and torch.allclose(a.grad, b.grad, atol=1e-6), (step, name)
    for (name, a), b in zip(ref.state_dict().items(), new.state_dict().values()):
        assert torch.allclose(a.double(), b.double(), atol=1e-6), name


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_kernels_run_where_autograd_records_nothing(mlp):
    """No grad mode, or nothing requiring grad: the kernels run; an input requiring grad: the original."""
    import sys

    ref, new = _pair(mlp)
    lib = sys.modules[type(new).__module__]._LIB
    x = torch.randn(16, 32)
    for context, frozen, x_grad, runs in [(torch.no_grad, False, False, True), (torch.inference_mode, False, True, True),
                                          (torch.enable_grad, True, False, True), (torch.enable_grad, True, True, False),
                                          (torch.enable_grad, False, False, False)]:
        new.requires_grad_(not frozen)
        del lib.launched[:]
        xi = x.clone().requires_grad_(x_grad)
        with context():
            got = new(xi)
        assert bool(lib.launched) == runs, (context.__name__, frozen, x_grad)
        assert got.requires_grad == (not runs), (context.__name__, frozen, x_grad)
        with torch.no_grad():
            assert torch.allclose(got, ref(x), atol=1e-5)
