"""Shapes: the header says which dims the kernels are specialised to, and the first call that another
shape sends to the original forward warns once, naming the dim and its value (CPU emulator)."""
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
        self.bias = nn.Parameter(torch.randn(24))

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
        out.append(([str(w.message) for w in said], bool(lib.launched)))
    return out


def test_header_names_the_specialised_dims(chain):
    _, result = chain
    assert "Specialised dims: every dim of x (6, 10, 24); y (6, 10, 24)" in result.source


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_first_fallback_for_a_shape_warns_once_naming_the_dim(chain):
    new_cls, _ = chain
    new = new_cls()
    calls = _calls(new, [(6, 10, 24), (6, 11, 24), (6, 11, 24), (3, 10, 24), (6, 10, 24)])
    said = [s for s, _ in calls]
    assert said[0] == [] and said[2:] == [[], [], []], said
    assert len(said[1]) == 1 and "x.shape[1] is 11, not 10" in said[1][0] and "once" in said[1][0]
    assert [ran for _, ran in calls] == [True, False, False, False, True]


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_other_fallbacks_do_not_use_up_the_warning(chain):
    new_cls, _ = chain
    new = new_cls()
    with torch.enable_grad():
        new(torch.randn(6, 10, 24), torch.randn(6, 10, 24))  # grad mode: the original forward, no word
    said = _calls(new, [(6, 12, 24)])[0][0]
    assert len(said) == 1 and "x.shape[1] is 12, not 10" in said[0]
