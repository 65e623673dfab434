"""nn.LSTM / nn.GRU / nn.RNN captured as one library node (capture/recurrent.py): its outputs' shapes,
the emitted call and its arguments, and the IR and the emitted library line against eager, on the CPU."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

from torchweld.capture import capture
from torchweld.capture.recurrent import is_recurrence
from torchweld.emit.forward import forward
from torchweld.interp import run_graph
from torchweld.options import Options
from torchweld.plan import plan
from torchweld.simplify import simplify


class Head(nn.Module):
    """A recurrence, then a pointwise epilogue on each output it returns (so they reach a kernel)."""

    def __init__(self, rnn: nn.Module, states: int):
        super().__init__()
        self.rnn, self.states = rnn, states

    def forward(self, x, *hx):
        h0 = (hx if len(hx) > 1 else hx[0]) if hx else None
        out, h = self.rnn(x, h0)
        hs = h if isinstance(h, tuple) else (h,)
        return (torch.tanh(out) * 2.0, *(s + 1.0 for s in hs))


# (id, module, input shape, initial state shapes or None: the module makes zeros)
CASES = [
    ("lstm", lambda: nn.LSTM(12, 16), (7, 3, 12), None),
    ("lstm_2l_bf", lambda: nn.LSTM(12, 16, num_layers=2, batch_first=True), (3, 7, 12), None),
    ("lstm_bidir_h0", lambda: nn.LSTM(12, 16, num_layers=2, bidirectional=True), (7, 3, 12), [(4, 3, 16), (4, 3, 16)]),
    ("lstm_proj", lambda: nn.LSTM(12, 16, num_layers=2, proj_size=8, batch_first=True), (3, 7, 12), None),
    ("lstm_nobias", lambda: nn.LSTM(12, 16, bias=False), (7, 3, 12), None),
    ("lstm_dropout_eval", lambda: nn.LSTM(12, 16, num_layers=3, dropout=0.3).eval(), (7, 3, 12), None),
    ("lstm_unbatched", lambda: nn.LSTM(12, 16), (7, 12), None),
    ("gru", lambda: nn.GRU(12, 16, num_layers=2, batch_first=True), (3, 7, 12), None),
    ("gru_bidir_h0", lambda: nn.GRU(12, 16, bidirectional=True), (7, 3, 12), [(2, 3, 16)]),
    ("rnn_tanh", lambda: nn.RNN(12, 16, num_layers=2), (7, 3, 12), None),
    ("rnn_relu_bf", lambda: nn.RNN(12, 16, nonlinearity="relu", batch_first=True, bias=False), (3, 7, 12), None),
]


def _case(case):
    _, make, shape, states = case
    torch.manual_seed(0)
    rnn = make()
    model = Head(rnn, len(states or ()))
    model.train(rnn.training)
    inputs = [torch.randn(shape)] + [torch.randn(s) for s in states or ()]
    return model, inputs


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_one_library_node_matches_eager(case):
    model, inputs = _case(case)
    g = capture(model, inputs)
    rec = [n for n in g.nodes if is_recurrence(n)]
    assert len(rec) == 1 and not any("mkldnn" in n.target for n in g.nodes)
    mode = type(model.rnn).__name__.lower()
    mode = mode if mode != "rnn" else "rnn_" + model.rnn.nonlinearity
    assert rec[0].target == f"aten.{mode}.input"
    # the module's own weights, in its flat order
    params = [g.by_name()[r].target for r in rec[0].args[2]]
    assert params == ["rnn." + n for n in model.rnn._flat_weights_names]
    want = model(*inputs)
    state = dict(model.named_parameters())
    for got_graph in (g, simplify(g)):
        got = run_graph(got_graph, state, inputs)
        assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_emitted_library_line_reproduces_the_module(case):
    """The emitted forward's recurrent call, run with torch on CPU tensors, is the module's output."""
    model, inputs = _case(case)
    g = simplify(capture(model, inputs))
    p = plan(g, Options())
    inputs_ir = [n for n in g.nodes if n.op == "input"]
    source = "\n".join(forward(p, inputs_ir, "self, " + ", ".join(n.target for n in inputs_ir)))
    mode = type(model.rnn).__name__.lower()
    line = next(l.strip() for l in source.splitlines() if re.search(r"= torch\.(lstm|gru|rnn_\w+)\(", l))
    assert line.endswith("# library")
    name, call = line.split("  #")[0].split(" = ", 1)
    assert call.startswith(f"torch.{mode if mode != 'rnn' else 'rnn_' + model.rnn.nonlinearity}(")
    env = {"torch": torch}
    env.update({n.name: dict(model.named_parameters())[n.target] for n in g.nodes if n.op == "param"})
    x_name = next(n.target for n in g.nodes if n.op == "input")
    env[x_name] = inputs[0] if inputs[0].dim() == 3 else inputs[0].unsqueeze(1)
    for n, t in zip([n for n in g.nodes if n.op == "input"][1:], inputs[1:]):
        env[n.target] = t
    rec = next(n for n in g.nodes if is_recurrence(n))
    for a in rec.inputs():  # the zeros the module makes for a missing initial state
        if g.by_name()[a].target == "aten.zeros.default":
            env[a] = torch.zeros(g.by_name()[a].shape)
        elif g.by_name()[a].op == "aten":
            pytest.skip("the input reaches the call through a view")
    got = eval(call, env)  # noqa: S307 (the line the compiler emitted)
    out, h = model.rnn(inputs[0], None if len(inputs) == 1 else (tuple(inputs[1:]) if len(inputs) > 2 else inputs[1]))
    want = (out if inputs[0].dim() == 3 else out.unsqueeze(1), *(h if isinstance(h, tuple) else (h,)))
    for a, b in zip(got, want):
        torch.testing.assert_close(a.reshape(b.shape), b, rtol=1e-5, atol=1e-5)


def test_train_flag_is_off_without_dropout_and_guarded_with_it():
    model, inputs = _case(CASES[1])
    rec = next(n for n in capture(model, inputs).nodes if is_recurrence(n))
    assert rec.args[6] is False  # the module is in training mode, but no dropout applies
    drop = Head(nn.LSTM(12, 16, num_layers=2, dropout=0.5), 0)
    g = simplify(capture(drop, [torch.randn(7, 3, 12)]))
    assert next(n for n in g.nodes if is_recurrence(n)).args[6] is True
    assert ("rnn", True) in plan(g).guard.modes


def test_packed_sequences_stay_as_traced():
    """The packed-sequence overload is not routed to the library node (it stays a CPU-only op: passthrough)."""
    from torchweld.capture import CaptureError

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(4, 8)

        def forward(self, x):
            packed = nn.utils.rnn.pack_padded_sequence(x, [5, 3], enforce_sorted=True)
            return self.rnn(packed)[1]

    try:
        g = capture(Packed(), [torch.randn(5, 2, 4)])
    except CaptureError:
        return
    assert not any(is_recurrence(n) for n in g.nodes)


class CellLoop(nn.Module):
    """nn.LSTMCell / GRUCell / RNNCell over time steps, the state carried by hand."""

    def __init__(self, cell: nn.Module):
        super().__init__()
        self.cell = cell

    def forward(self, x, h):
        lstm = isinstance(self.cell, nn.LSTMCell)
        state = (h, h * 0.5) if lstm else h
        for t in range(x.shape[0]):
            state = self.cell(x[t], state)
        return state[0] + state[1] if lstm else state


CELLS = [
    ("lstm_cell", lambda: nn.LSTMCell(12, 16)),
    ("gru_cell", lambda: nn.GRUCell(12, 16)),
    ("rnn_tanh_cell", lambda: nn.RNNCell(12, 16)),
    ("rnn_relu_cell_nobias", lambda: nn.RNNCell(12, 16, bias=False, nonlinearity="relu")),
]


@pytest.mark.parametrize("case", CELLS, ids=[c[0] for c in CELLS])
def test_cells_trace_functionally_one_kernel_per_step(case):
    """Their CPU forms update gates in place (left to PyTorch, one op each); traced as their math, each
    step's gates are one kernel, and the IR is the module's output."""
    torch.manual_seed(0)
    model = CellLoop(case[1]())
    inputs = [torch.randn(6, 3, 12), torch.randn(3, 16)]
    g = simplify(capture(model, inputs))
    assert not [n for n in g.nodes if n.op == "aten" and n.target.split(".")[1].endswith("_")]
    p = plan(g)
    assert 6 <= len(p.kernels) <= 7  # one per step (an LSTM's last sum may join the last step or not)
    torch.testing.assert_close(run_graph(g, dict(model.named_parameters()), inputs), model(*inputs),
                               rtol=1e-5, atol=1e-5)
