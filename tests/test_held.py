"""Which values plan/held.py makes once: built from constants (and parameters) alone, never random,
never written into, never returned."""
from __future__ import annotations

import torch

from helpers import kernels


def _held(fn, *inputs, **params):
    p = kernels(fn, *inputs, **params)
    nodes = p.graph.by_name()
    return p, [nodes[h].target or nodes[h].op for h in p.held]


def test_a_mask_from_ones_is_held_and_no_kernel_takes_it_in():
    p, held = _held(lambda s, x: torch.softmax(x.masked_fill(torch.ones(8, 8).triu(1).bool(), -1e9), -1),
                    torch.randn(2, 8, 8))
    assert held == ["aten.ones.default", "aten.triu.default", "cast"]
    assert len(p.kernels) == 1 and not set(p.held) & set(p.kernels[0].nodes)


def test_random_and_returned_values_are_not_held():
    _, held = _held(lambda s, x: x + torch.rand(8), torch.randn(2, 8))
    assert held == []
    def returned(s, x):
        m = torch.ones(8, 8).triu(1)
        return x * m, m.t()

    _, held = _held(returned, torch.randn(2, 8, 8))
    assert held == ["aten.ones.default"]  # NOTE: the caller may write into what forward returns (a view of triu)


def test_a_parameter_alone_is_left_to_the_other_decisions():
    _, held = _held(lambda s, x: x @ (s.w * 2.0).t(), torch.randn(4, 8), w=torch.randn(8, 8))
    assert held == []


def test_no_kernel_writes_over_a_held_value():
    """A held GEMM's result read by one kernel alone would be its buffer to reuse: the next call reads it."""
    p, held = _held(lambda s, x: torch.relu(torch.eye(8) @ torch.ones(8, 8) * x), torch.randn(8, 8))
    assert "aten.mm.default" in held
    assert not set(p.written_over.values()) & set(p.held)


def test_a_held_gemm_is_no_gemm_site_nor_ours():
    """With --gemm, our GEMM took a held product as its anchor: `_tw_held` then returned a name it never made."""
    from helpers import graphs
    from torchweld.options import Options
    from torchweld.plan import plan

    fn = lambda s, x: torch.relu(torch.ones(64, 64).triu() @ s.w + x)  # noqa: E731
    g = graphs(fn, torch.randn(64, 64), w=torch.randn(64, 64))[1]
    for options in (Options(), Options(gemm=True)):
        p = plan(g, options)
        assert "aten.mm.default" in {p.graph.by_name()[h].target for h in p.held}
        assert not p.gemm_ours and not [s for s in p.gemm_sites.values() if not isinstance(s, str)]
        assert not set(p.held) & {m for k in p.kernels for m in k.nodes}


class _SwinBias(torch.nn.Module):
    """A relative-position bias gathered through an index buffer (as Swin registers it)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(9, 2))
        self.register_buffer("index", torch.randint(0, 9, (16,)))
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        bias = self.table[self.index].view(4, 4, 2).permute(2, 0, 1)
        return torch.softmax(x + bias, -1), self.bn(x[0, 0].view(1, 4, 4) + self.bn.running_mean.repeat(4).view(4, 4))


def test_work_on_parameters_alone_is_held_but_not_on_statistics_written_in_forward():
    from torchweld.capture import capture
    from torchweld.plan import plan
    from torchweld.simplify import simplify

    p = plan(simplify(capture(_SwinBias().train(), [torch.randn(3, 2, 4, 4)])))
    held = {p.graph.by_name()[h].target for h in p.held}
    assert "aten.index.Tensor" in held  # NOTE: used to be gathered on every call
    assert "aten.repeat.default" not in held  # NOTE: the running mean is written in forward
