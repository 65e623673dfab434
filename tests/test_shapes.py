"""Shapes: the header says which dims the kernels are specialised to, and the first call that another
shape sends to the original forward warns once, naming the dim and its value (CPU emulator). The chain's
inputs are (batch, sequence, features): its batch and sequence length are runtime sizes, its features not."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch

from emulator import GXX, emulated_model, write_problem

CHAIN = '''"""A pointwise chain with a broadcast parameter."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1))

    def forward(self, x, y):
        return torch.relu(x * 2.0 + self.bias) - y


def get_inputs():
    return [torch.randn(6, 10, 24), torch.randn(6, 10, 24)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shapes")
    return emulated_model(write_problem(tmp, "chain", CHAIN), tmp)


def _calls(new, shapes):
    """The warnings each call gives, and whether its kernels ran."""
    lib = sys.modules[type(new).__module__]._LIB
    out = []
    for shape in shapes:
        del lib.launched[:]
        x, y = torch.randn(shape), torch.randn(shape)
        with warnings.catch_warnings(record=True) as said, torch.no_grad():
            warnings.simplefilter("always")
            got = new(x, y)
        assert torch.allclose(got, torch.relu(x * 2.0 + new.bias) - y, atol=1e-6)
        assert all(w.filename == __file__ for w in said), [w.filename for w in said]  # the caller's line
        out.append(([str(w.message) for w in said], bool(lib.launched)))
    return out


def test_header_names_the_specialised_dims(chain):
    _, result = chain
    assert "Specialised dims: the others, x (batch, sequence, 24); y (batch, sequence, 24)" in result.source
    assert ("Runtime dims: the batch and the sequence length (dims 0 and 1 of every input; captured 6 and 10), any "
            "sizes whose product, the tokens, is from 1 to 89,478,485") in result.source


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_first_fallback_for_a_shape_warns_once_naming_the_dim(chain):
    new_cls, _ = chain
    new = new_cls()
    calls = _calls(new, [(6, 10, 24), (6, 10, 25), (6, 10, 25), (3, 11, 24), (6, 10, 24)])
    said = [s for s, _ in calls]
    assert said[0] == [] and said[2:] == [[], [], []], said
    assert len(said[1]) == 1 and "x.shape[2] is 25, not 24" in said[1][0] and "once" in said[1][0]
    assert [ran for _, ran in calls] == [True, False, False, True, True]  # another batch and length run the kernels


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_other_fallbacks_do_not_use_up_the_warning(chain):
    new_cls, _ = chain
    new = new_cls()
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new(torch.randn(6, 10, 24), torch.randn(6, 10, 24))  # grad mode: the original forward
    said = _calls(new, [(6, 10, 26)])[0][0]
    assert len(said) == 1 and "x.shape[2] is 26, not 24" in said[0]


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_a_call_autograd_records_warns_once_and_no_grad_runs_the_kernels(chain):
    new_cls, _ = chain
    new = new_cls()
    lib = sys.modules[type(new).__module__]._LIB
    said = []
    for _ in range(2):
        del lib.launched[:]
        with torch.enable_grad(), warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            new(torch.randn(6, 10, 24), torch.randn(6, 10, 24))
        said.append([str(w.message) for w in got])
        assert not lib.launched and all(w.filename == __file__ for w in got)
    assert len(said[0]) == 1 and "autograd records this call" in said[0][0] and "no_grad" in said[0][0]
    assert said[1] == []  # NOTE: once per module
    assert _calls(new, [(6, 10, 24)]) == [([], True)]  # under no_grad the kernels run, silently


LINEAR = '''"""A linear, a bias and a pointwise chain: the batch reaches the kernel through the GEMM."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 36)
        self.scale = nn.Parameter(torch.rand(36) + 0.5)

    def forward(self, x, y):
        return torch.tanh(self.fc(x) * self.scale) + torch.sigmoid(y)


def get_inputs():
    return [torch.randn(8, 20), torch.randn(8, 36)]


def get_init_inputs():
    return []
'''


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("body,rest", [(CHAIN, [(10, 24), (10, 24)]), (LINEAR, [(20,), (36,)])], ids=["chain", "linear"])
def test_one_emission_runs_its_kernels_at_other_batch_sizes(tmp_path, body, rest):
    """The batch is a runtime size: batch sizes 1, 3, the captured one and 5x it (odd element counts take
    the scalar build) run the kernels, silently, and match eager."""
    path = write_problem(tmp_path, "batch", body)
    new_cls, result = emulated_model(path, tmp_path)
    captured = result.plan.graph.by_name()["x0"].shape[0] if "x0" in result.plan.graph.by_name() else None
    assert result.plan.guard.batch and all(k.batch for k in result.plan.kernels), result.plan.guard
    assert "Runtime dims: the batch" in result.source
    namespace: dict = {}
    exec(body, namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    lib = sys.modules[type(new).__module__]._LIB
    b = result.plan.guard.batch[0]
    for batch in (1, 3, b, 5 * b):
        xs = [torch.randn(batch, *r) for r in rest]
        del lib.launched[:]
        with warnings.catch_warnings(record=True) as said, torch.no_grad():
            warnings.simplefilter("always")
            got, want = new(*xs), ref(*xs)
        assert lib.launched and not said, (batch, said)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5), batch
    assert captured in (None, b)


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_beyond_the_largest_batch_takes_the_original(chain):
    new_cls, result = chain
    assert result.plan.guard.batch == (6, (2**31 - 1) // 24) and result.plan.guard.seq == 10  # tokens of 24 elements
    source = result.source
    assert "not 0 < x.shape[0] * x.shape[1] <= 89478485" in source and "y.shape[0] != x.shape[0]" in source


def test_a_batch_mixed_with_other_dims_stays_specialised(tmp_path):
    """A reduction over dim 0 reads the batch as more than a count: every dim stays specialised."""
    from torchweld.pipeline import compile_problem
    from torchweld.problem import load_problem

    body = CHAIN.replace("return torch.relu(x * 2.0 + self.bias) - y", "return torch.relu(x * 2.0 + self.bias).sum(0) - y[0]")
    result = compile_problem(load_problem(write_problem(tmp_path, "mixed", body)))
    assert result.plan.guard.batch == () and not any(k.batch for k in result.plan.kernels)
    assert "Specialised dims: every dim of x (6, 10, 24)" in result.source


CONV = '''"""A convolution, then a pointwise chain with a per-channel bias and the residual input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bias = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias) * 0.5 + x


def get_inputs():
    return [torch.randn(4, 8, 6, 5)]


def get_init_inputs():
    return []
'''


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_conv_epilogue_at_other_batch_sizes(tmp_path, channels_last):
    """Both builds of the kernel after a convolution (NCHW, and `_cl` reading its channels-last
    output) take the batch at run time."""
    from emulator import force_conv_layout

    path = write_problem(tmp_path, "conv", CONV)
    new_cls, result = emulated_model(path, tmp_path)
    assert result.plan.guard.batch and result.plan.layouts.of(result.plan.kernels[0])
    namespace: dict = {}
    exec(CONV, namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    force_conv_layout(new, channels_last)
    lib = sys.modules[type(new).__module__]._LIB
    for batch in (1, 4, 7):
        x = torch.randn(batch, 8, 6, 5)
        del lib.launched[:]
        with torch.no_grad():
            got, want = new(x), ref(x)
        assert lib.launched == ["k0_cl" if channels_last else "k0"], lib.launched
        assert torch.allclose(got, want, atol=1e-5), batch


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_a_convolution_picks_its_layout_per_batch_class(tmp_path):
    """A runtime batch changes the convolution's shape: `_tw_conv` measures its layouts again at the first
    call of each power-of-two class of the batch, never within one, and converts the weight once per layout."""
    path = write_problem(tmp_path, "conv", CONV)
    new_cls, result = emulated_model(path, tmp_path)
    assert result.plan.guard.batch
    namespace: dict = {}
    exec(CONV, namespace)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    picks = []

    def pick(x, w, args, fmt, to):  # NOTE: channels-last for even batches: both layouts run, each weight packed once
        picks.append(x.shape[0])
        return ((fmt if x.shape[0] % 2 == 0 else None), False), []

    type(new).forward.__globals__["_tw_pick"] = pick
    with torch.no_grad():
        for batch in (1, 4, 7, 4, 2, 3, 16):
            x = torch.randn(batch, 8, 6, 5)
            assert torch.allclose(new(x), ref(x), atol=1e-5), batch
    assert picks == [1, 4, 2, 16], picks  # classes 1, 4-7, 2-3 and 16-31
    assert list(new._tw_conv_packed) == [(0, torch.channels_last)]


def test_a_constant_made_from_the_batch_keeps_it_specialised(tmp_path):
    """`x / x.size(0)` bakes the batch into the kernel: traced at another batch, the graph differs."""
    from torchweld.pipeline import compile_problem
    from torchweld.problem import load_problem

    body = CHAIN.replace("return torch.relu(x * 2.0 + self.bias) - y", "return torch.relu(x / x.size(0) + self.bias) - y")
    result = compile_problem(load_problem(write_problem(tmp_path, "sized", body)))
    assert result.plan.guard.batch == () and "Specialised dims: every dim of x (6, 10, 24)" in result.source
    same = compile_problem(load_problem(write_problem(tmp_path, "plain", CHAIN)))
    assert same.plan.guard.batch == (6, 89478485) and same.plan.guard.seq == 10
