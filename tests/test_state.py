"""Module state a hand-written RNN holds (capture/state.py): a plain tensor attribute traced as state,
and state forward assigns anew written back by the emitted forward, as the original does."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn as nn

from torchweld.capture import capture
from torchweld.emit.forward import forward
from torchweld.interp import run_graph
from torchweld.options import Options
from torchweld.plan import plan
from torchweld.simplify import simplify


class Elman(nn.Module):
    """The hidden state a plain attribute (or a buffer), replaced on every call."""

    def __init__(self, buffer: bool):
        super().__init__()
        hidden = torch.randn(4, 16)
        if buffer:
            self.register_buffer("hidden", hidden)
        else:
            self.hidden = hidden
        self.i2h = nn.Linear(8 + 16, 16)
        self.h2o = nn.Linear(16, 5)

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.h2o(self.hidden)


@pytest.mark.parametrize("buffer", [False, True], ids=["attribute", "buffer"])
def test_hidden_state_is_captured_and_written_back(buffer):
    torch.manual_seed(0)
    model = Elman(buffer)
    x = torch.randn(4, 8)
    g = simplify(capture(model, [x]))
    assert g.writes == ("hidden",) and g.single_output
    hidden = next(n for n in g.nodes if n.op == "param" and n.target == "hidden")
    assert hidden.attr("plain") is (None if buffer else True)
    p = plan(g, Options())
    assert hidden.name in p.guard.params and hidden.name in p.guard.shapes  # device, dtype and shape checked
    assert any("assigns module state" in why for why in p.graph_blockers)
    inputs = [n for n in g.nodes if n.op == "input"]
    lines = forward(p, inputs, "self, x", Options())
    fetch = "self.hidden" if not buffer else "self._buffers['hidden']"
    assert f"        {hidden.name} = {fetch}  # self.hidden" in lines
    assert lines[-1].startswith("        return ") and lines[-2].startswith("        self.hidden = v")
    # the IR over three calls, the state carried as forward carries it, against the module's own calls
    eager = Elman(buffer)
    eager.load_state_dict(model.state_dict())
    eager.hidden = model.hidden.clone()
    state = {**dict(model.named_parameters()), "hidden": model.hidden.clone()}
    every = replace(g, single_output=False)
    for _ in range(3):
        x = torch.randn(4, 8)
        *out, new = run_graph(every, state, [x])
        state["hidden"] = new
        torch.testing.assert_close(out[0], eager(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(new, eager.hidden, rtol=1e-5, atol=1e-5)


def test_state_given_as_input_needs_no_write():
    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = nn.Linear(24, 16)

        def forward(self, x, h):
            return torch.tanh(self.cell(torch.cat((x, h), dim=1)))

    g = capture(Step(), [torch.randn(4, 8), torch.randn(4, 16)])
    assert g.writes == () and not any(n.attr("plain") for n in g.nodes)


def test_tuple_output_with_state():
    class Two(Elman):
        def forward(self, x):
            self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
            return self.h2o(self.hidden), self.hidden * 2.0

    g = capture(Two(False), [torch.randn(4, 8)])
    assert g.writes == ("hidden",) and not g.single_output and len(g.outputs) == 3
