"""Capture of nn.LSTM / nn.GRU / nn.RNN as one library node: `aten.lstm.input` (or gru, rnn_tanh,
rnn_relu) with the module's own weights, which ATen runs in cuDNN on a GPU.

The trace runs on the CPU, where ATen decomposes these ops into CPU-only ones (`mkldnn_rnn_layer`) or
into one small op per time step. While tracing, `one_op_recurrences()` routes the module's call
(`torch._VF.lstm(input, hx, params, ...)`) to a custom op of the same schema that the trace records
whole; `as_library(graph)` renames it to the aten op, which the emitted forward calls as `torch.lstm`.

The cells (nn.LSTMCell, GRUCell, RNNCell) are traced as their gate math in functional ops, so a loop
of them fuses each step into one kernel (ATen's CPU forms update their gates in place).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from torchweld.ir import Graph, Node

# Recurrences by mode: the schema's hidden-state argument (lstm: a list [h0, c0]; else one tensor).
MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
# NOTE: a namespace of their own: another part of torchweld may define ops under "torchweld"
NAMESPACE = "torchweld_recurrent"
ATEN = {f"{NAMESPACE}.{m}.default": f"aten.{m}.input" for m in MODES}
_ARGS = ("bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first")


def _define() -> tuple:
    """The trace-only custom ops, one per mode, each with the aten op's schema and a fake kernel."""
    # NOTE: they never run for real: the trace records them, and as_library renames them
    lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    ops = {}
    for mode in MODES:
        hx = "Tensor[] hx" if mode == "lstm" else "Tensor hx"
        outs = "(Tensor, Tensor, Tensor)" if mode == "lstm" else "(Tensor, Tensor)"
        lib.define(f"{mode}(Tensor input, {hx}, Tensor[] params, {_ARGS}) -> {outs}")
        torch.library.register_fake(f"{NAMESPACE}::{mode}", _fake, lib=lib)
        ops[mode] = getattr(getattr(torch.ops, NAMESPACE), mode).default
    return lib, ops


def _fake(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """Output shapes and strides as ATen's recurrent ops give them: the output of a batch_first call
    is the transpose of a (T, B, D*H) tensor; h_n (and c_n) are (D*L, B, H) and contiguous."""
    h = hx[0] if isinstance(hx, (list, tuple)) else hx
    directions = 2 if bidirectional else 1
    length, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    out = x.new_empty((length, batch, directions * h.shape[-1]))
    out = out.transpose(0, 1) if batch_first else out
    states = hx if isinstance(hx, (list, tuple)) else [hx]
    return (out, *(s.new_empty(s.shape) for s in states))


@functools.cache
def _ops() -> dict:
    """{mode: op}; NOTE: cached, since an op name is registered once per process (the Library handle
    is kept with them: dropping it would unregister them)."""
    lib, ops = _define()
    return {**ops, "_lib": lib}


class _OneOp(TorchFunctionMode):
    """Routes `torch._VF.<mode>(input, hx, params, ...)` (the call nn.LSTM/GRU/RNN make) to the trace-only op."""

    def __init__(self, ops: dict):
        super().__init__()
        self.by_fn = {getattr(torch._VF, m): ops[m] for m in MODES}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        cell = CELLS.get(getattr(func, "__name__", None))
        if cell is not None and func is getattr(torch._VF, func.__name__) and not kwargs:
            return cell(*args)  # NOTE: the mode is off while it runs: these calls trace as themselves
        op = self.by_fn.get(func)
        # NOTE: the packed-sequence overload (data, batch_sizes, hx, params, ...) has a tensor second
        # (lstm) or its params third (gru/rnn); it stays as traced
        if op is not None and not kwargs and len(args) == 9 and _input_overload(func, args):
            return op(*args)
        return func(*args, **(kwargs or {}))


def _lstm_cell(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """ATen's lstm_cell, in ops that trace functionally (its CPU form updates its gates in place); the
    two projections chunked before they are added (the same sums), so the adds join the gate kernel."""
    xi, xf, xg, xo = F.linear(x, w_ih, b_ih).chunk(4, 1)
    hi, hf, hg, ho = F.linear(hx[0], w_hh, b_hh).chunk(4, 1)
    i, f, g, o = xi + hi, xf + hf, xg + hg, xo + ho
    c = torch.sigmoid(f) * hx[1] + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _gru_cell(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """ATen's gru_cell, in the same order of operations."""
    ir, iz, i_n = F.linear(x, w_ih, b_ih).chunk(3, 1)
    hr, hz, h_n = F.linear(hx, w_hh, b_hh).chunk(3, 1)
    reset, update = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
    new = torch.tanh(i_n + reset * h_n)
    return (hx - new) * update + new


def _rnn_cell(act):
    def cell(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
        return act(F.linear(x, w_ih, b_ih) + F.linear(hx, w_hh, b_hh))
    return cell


# nn.LSTMCell / GRUCell / RNNCell's calls (torch._VF.<name>(input, hx, w_ih, w_hh, b_ih, b_hh)): traced
# as these, each step's gate math then fuses into one kernel
CELLS = {"lstm_cell": _lstm_cell, "gru_cell": _gru_cell, "rnn_tanh_cell": _rnn_cell(torch.tanh),
         "rnn_relu_cell": _rnn_cell(torch.relu)}


def _input_overload(func, args) -> bool:
    if func is torch._VF.lstm:
        return isinstance(args[1], (list, tuple))
    return isinstance(args[2], (list, tuple))


def one_op_recurrences():
    """While tracing: each recurrent module's call is one node of the trace."""
    try:
        return _OneOp(_ops())
    except Exception:  # NOTE: a PyTorch without this registration API traces as before
        return contextlib.nullcontext()


def as_library(graph: Graph) -> Graph:
    """The trace-only ops renamed to the aten ops they stand for (library calls, cuDNN on a GPU)."""
    if not any(n.op == "aten" and n.target in ATEN for n in graph.nodes):
        return graph
    nodes = tuple(_library(n) if n.op == "aten" and n.target in ATEN else n for n in graph.nodes)
    return replace(graph, nodes=nodes)


def _library(n: Node) -> Node:
    """Node `n` as its aten op; `train` off where no dropout applies (it would only make cuDNN keep
    what a backward pass needs, and the outputs are the same)."""
    args = list(n.args)
    if not _dropout(n):
        args[6] = False
    return replace(n, target=ATEN[n.target], args=tuple(args))


def _dropout(n: Node) -> bool:
    """Dropout applies between layers: more than one layer and a nonzero rate."""
    return n.args[4] > 1 and n.args[5] > 0


def is_recurrence(n: Node) -> bool:
    return n.op == "aten" and n.target in ATEN.values()


def modes(graph: Graph) -> tuple[tuple[str, bool], ...]:
    """(module, training) of each recurrence whose dropout makes its output depend on the mode."""
    by_name = graph.by_name()
    out = []
    for n in graph.nodes:
        if is_recurrence(n) and _dropout(n):
            weight = by_name[n.args[2][0]]
            path = weight.target.rsplit(".", 1)[0] if "." in weight.target else ""
            out.append((path, bool(n.args[6])))
    return tuple(out)
