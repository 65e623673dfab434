"""Forward's guard checks the dtype and device of every parameter a kernel reads, also through views
(select, slice, reshape, transposes, chains of them): one of another dtype takes the original forward."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, write_problem

SLICED = '''"""Parameters reaching a kernel through a select, a slice and a chain of views."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 64))
        self.b = nn.Parameter(torch.randn(128))
        self.s = nn.Parameter(torch.randn(64, 2))

    def forward(self, x):
        return torch.relu(x * self.w[0] + self.w[1] + self.b[:64] - self.s.t()[1])


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sliced")
    return emulated_model(write_problem(tmp, "sliced", SLICED), tmp)


def test_guard_names_parameters_behind_views(sliced):
    _, result = sliced
    targets = {result.plan.graph.by_name()[p].target for p in result.plan.guard.params}
    assert targets == {"w", "b", "s"}


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("name", ["w", "b", "s"])
def test_parameter_of_another_dtype_takes_the_original(sliced, name):
    new_cls, _ = sliced
    namespace: dict = {}
    exec(SLICED, namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    x = torch.randn(16, 64)
    with torch.no_grad():
        assert torch.allclose(new(x), ref(x), atol=1e-6)  # the kernels run
        for m in (ref, new):
            setattr(m, name, torch.nn.Parameter(getattr(m, name).double()))
        want, got = ref(x), new(x)
    assert got.dtype == want.dtype == torch.float64
    assert torch.allclose(got, want, atol=1e-12)


DEFAULTS = '''"""forward's parameters the trace was not given: their defaults."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(8))

    def forward(self, x, mask=None, scale: float = 2.0, *, shift=-1.5):
        y = torch.relu(x * self.w) * scale + shift
        if mask is not None:
            y = y * mask
        return y


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_parameters_left_to_their_defaults_are_guarded_and_passed_on(tmp_path):
    """A call giving mask, another scale or shift runs the original forward with them; the defaults run the kernels."""
    import sys

    new_cls, result = emulated_model(write_problem(tmp_path, "defaults", DEFAULTS), tmp_path)
    assert "or mask is not None" in result.source and "return self._tw_general(x, mask, scale, shift=shift)" in result.source
    namespace: dict = {}
    exec(DEFAULTS, namespace)
    torch.manual_seed(0)
    ref = namespace["Model"]()
    new = new_cls()
    new.load_state_dict(ref.state_dict())
    lib = sys.modules[type(new).__module__]._LIB
    x, mask = torch.randn(4, 8), torch.rand(4, 8)
    for kwargs, runs in [({}, True), ({"mask": mask}, False), ({"scale": 3.0}, False), ({"scale": 2}, False),
                         ({"shift": -1.5}, True), ({"shift": 0.5}, False)]:
        del lib.launched[:]
        with torch.no_grad():
            assert torch.allclose(new(x, **kwargs), ref(x, **kwargs), atol=1e-6), kwargs
        assert bool(lib.launched) == runs, kwargs
