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
