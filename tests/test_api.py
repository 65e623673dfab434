"""torchweld.compile on modules defined here (not problem files): sharing, state_dict keys, fallbacks
part by part, the cache, save() as the CLI's file, bad input, and the saved file run on the emulator."""
from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import torchweld
import torchweld.api.whole as whole
from emulator import GXX, emulate
from torchweld.api import CompileError
from torchweld.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
SCALE = 0.5


def act(x):
    return torch.relu(x) * SCALE


class Block(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)
        self.norm = nn.BatchNorm1d(d)

    def forward(self, x):
        return self.norm(torch.tanh(self.fc2(act(self.fc1(x)))) + x)


class Gated(nn.Module):
    """Data-dependent control flow: the compiler cannot take it whole, its blocks it can."""

    def __init__(self):
        super().__init__()
        self.first = Block(32, 64)
        self.rest = nn.ModuleList([Block(32, 48), Block(32, 16)])

    def forward(self, x):
        x = self.first(x)
        if x.sum() > 0:
            x = -x
        for b in self.rest:
            x = b(x)
        return x


def _compile(module, inputs, tmp_path, **options):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        new = torchweld.compile(module, inputs, cache_dir=tmp_path / "cache", **options)
    return new, [str(w.message) for w in said if "torchweld" in str(w.message)]


def test_shares_parameters_buffers_and_state_dict_keys(tmp_path):
    torch.manual_seed(0)
    m = Block(32, 64)
    new, said = _compile(m, [torch.randn(8, 32)], tmp_path)
    assert said == [] and new.torchweld.fallbacks == ()
    assert isinstance(new, Block) and new is not m
    assert list(new.state_dict()) == list(m.state_dict())
    for (n, a), (k, b) in zip([*m.named_parameters(), *m.named_buffers()], [*new.named_parameters(), *new.named_buffers()]):
        assert n == k and a is b and a.data_ptr() == b.data_ptr()
    assert new._modules is m._modules and new._parameters is m._parameters
    x = torch.randn(8, 32)
    with torch.no_grad():
        assert torch.equal(new(x), m(x))
        m.fc1.weight.mul_(2)  # an update of the original is the compiled module's too
        assert torch.equal(new(x), m(x))
    assert "_tw_general" in type(new).__dict__ and type(new).forward is not Block.forward


def test_second_call_reads_the_cache(tmp_path, monkeypatch):
    m, x = Block(32, 64), torch.randn(8, 32)
    first, _ = _compile(m, [x], tmp_path)
    assert not first.torchweld.cached and first.torchweld.path.parent == tmp_path / "cache"
    def capture(*args, **kwargs):
        raise AssertionError("captured again")

    monkeypatch.setattr(whole, "capture", capture)
    second, _ = _compile(Block(32, 64), [x], tmp_path)
    assert second.torchweld.cached and second.torchweld.path == first.torchweld.path
    assert second.torchweld.source == first.torchweld.source
    third, said = _compile(Block(32, 64), [torch.randn(4, 32)], tmp_path)  # another shape: another file
    assert "captured again" in third.torchweld.fallbacks[0][1], said


def test_falls_back_part_by_part_and_says_so_once(tmp_path):
    torch.manual_seed(0)
    m = Gated()
    x = torch.randn(8, 32)
    new, said = _compile(m, [x], tmp_path)
    assert len(said) == 1 and "(the whole module)" in said[0] and "1 part(s)" in said[0], said
    parts = new.torchweld.parts
    assert set(parts) == {"first", "rest"} and set(parts["rest"].parts) == {"0", "1"}
    assert all(new.get_submodule(p).torchweld.source for p in ("first", "rest.0", "rest.1"))
    assert list(new.state_dict()) == list(m.state_dict())
    assert all(a is b for a, b in zip(m.state_dict(keep_vars=True).values(), new.state_dict(keep_vars=True).values()))
    assert new._modules is not m._modules and m.first.__class__ is Block  # the original keeps its own parts
    with torch.no_grad():
        assert torch.equal(new(x), m(x))
    assert "Nothing fused" in new.torchweld.source  # save(): what the CLI writes where it falls back
    again, said = _compile(Gated(), [x], tmp_path)
    assert len(said) == 1 and all(again.get_submodule(p).torchweld.cached for p in ("first", "rest.0", "rest.1"))


def test_class_defined_inline_with_a_closure(tmp_path):
    k = 3.0

    class Inline(nn.Module):
        def __init__(self):
            super(Inline, self).__init__()
            self.w = nn.Parameter(torch.rand(16))

        def forward(self, x):
            return torch.sigmoid(x * self.w + k)

    new, said = _compile(Inline(), [torch.randn(4, 16)], tmp_path)
    assert said == []
    src = new.torchweld.source
    assert "k = 3.0" in src and "class ModelNew(nn.Module):" in src and "super().__init__()" in src


def test_save_writes_the_clis_file(tmp_path):
    path = ROOT / "problems" / "seeds" / "seed001_conv2d_relu_bias.py"
    cli = torchweld.compile_file(path, tmp_path / "cli.py")
    problem = load_problem(path)
    new, said = _compile(problem.build_model(), problem.inputs(), tmp_path)
    assert said == []
    saved = new.save(tmp_path / "api.py")
    assert saved.read_text() == cli.read_text()


@pytest.mark.parametrize("call,message", [
    (lambda: torchweld.compile(3, []), "module must be an nn.Module, not int"),
    (lambda: torchweld.compile(Block(4, 4), {"x": 1}), "example_inputs must be a tensor or a list"),
    (lambda: torchweld.compile(Block(4, 4), ["x"]), "example_inputs[0] is a str"),
    (lambda: torchweld.compile(Block(4, 4), [torch.ones(2, 4)] * 2), "Block.forward does not take 2 example input(s)"),
    (lambda: torchweld.compile(Block(4, 4), torch.ones(2, 4), fast=True), "unknown option(s) fast"),
    (lambda: torchweld.compile(Block(4, 4), torch.ones(2, 4), precision="fp8"), "precision must be one of"),
])
def test_bad_input_is_one_line(call, message):
    with pytest.raises(CompileError) as e:
        call()
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_saved_file_is_standalone_and_checks_its_configuration(tmp_path):
    """The saved file rebuilt with the same constructor runs its kernels (emulated) as eager; built
    with other arguments, the original forward."""
    torch.manual_seed(0)
    m = Block(32, 64).eval()
    new, _ = _compile(m, [torch.randn(8, 32)], tmp_path)
    source = new.save(tmp_path / "block_new.py").read_text()
    assert "import torchweld" not in source and "from torchweld" not in source
    emu_cls, _ = emulate(SimpleNamespace(source=source, problem=SimpleNamespace(path=tmp_path / "block.py")), tmp_path)
    import sys

    lib = sys.modules[emu_cls.__module__]._LIB
    for args, runs in [((32, 64), True), ((32, 48), False)]:
        torch.manual_seed(1)
        ref, emu = Block(*args).eval(), emu_cls(*args).eval()
        emu.load_state_dict(ref.state_dict())
        x = torch.randn(8, 32)
        del lib.launched[:]
        with torch.no_grad():
            assert torch.allclose(emu(x), ref(x), atol=1e-5)
        assert bool(lib.launched) == runs, args
