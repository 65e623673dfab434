"""Rewrites: table-driven (model -> expected ops), and every rewrite checked on NaN/inf inputs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import SPECIAL, arithmetic_ops, graphs, special_values
from torchweld.interp import run_graph


def seed000(self, c):
    o = c.clone().detach()
    x = c + self.bias
    x = x + o
    x = x * o
    return x + o


# (name, fn, params, expected pointwise ops after simplify, in order)
CASES = [
    ("seed000", seed000, {"bias": torch.randn(4, 1, 1)}, ["fma", "fma"]),
    ("x*1 -> x", lambda s, x: torch.relu(x * 1.0), {}, ["relu"]),
    ("x+0 -> x", lambda s, x: torch.sigmoid(x + 0), {}, ["sigmoid"]),
    ("x/2 -> x*0.5", lambda s, x: x / 2.0, {}, ["mul"]),
    ("x-c -> x+(-c)", lambda s, x: torch.tanh(x) - 3.0, {}, ["tanh", "add"]),
    ("--x -> x", lambda s, x: torch.exp(-(-x)), {}, ["exp"]),
    ("x**2+1 -> fma(x, x, 1)", lambda s, x: x.pow(2) + 1.0, {}, ["fma"]),
    ("a*b+c -> fma", lambda s, x, y: x * y + x, {}, ["fma"]),
    ("x+x+x -> 3x", lambda s, x: x + x + x, {}, ["mul"]),
    ("cse", lambda s, x: torch.exp(x) + torch.exp(x), {}, ["exp", "mul"]),
    ("clone/detach dropped", lambda s, x: torch.relu(x.clone().detach().contiguous()), {}, ["relu"]),
    ("x-x kept as x*0", lambda s, x: torch.relu(x - x), {}, ["mul", "relu"]),
    ("multi-use values are not expanded", lambda s, x: (x + 1.0) * (x + 1.0) + (x + 1.0), {}, ["add", "fma"]),
]


def _ops(graph):
    return [n.op for n in graph.nodes if n.is_pointwise]


@pytest.mark.parametrize("name,fn,params,expected", CASES, ids=[c[0] for c in CASES])
def test_rewrite_table(name, fn, params, expected):
    nargs = fn.__code__.co_argcount - 1
    inputs = [torch.randn(4, 5, 6) for _ in range(nargs)]
    _, simplified = graphs(fn, *inputs, **params)
    assert _ops(simplified) == expected, str(simplified)


def test_seed000_at_most_three_arithmetic_ops():
    captured, simplified = graphs(seed000, torch.randn(2, 4, 3, 3), bias=torch.randn(4, 1, 1))
    assert arithmetic_ops(captured) == 4
    assert arithmetic_ops(simplified) <= 3
    assert any("collect_linear" in line for line in simplified.log)


@pytest.mark.parametrize("name,fn,params,expected", CASES, ids=[c[0] for c in CASES])
def test_rewrites_keep_nan_and_inf(name, fn, params, expected):
    """The simplified graph computes what the captured one does on inf, -inf, NaN, -0 and huge values."""
    nargs = fn.__code__.co_argcount - 1
    torch.manual_seed(0)
    inputs = [special_values((4, 5, 6)) for _ in range(nargs)]
    captured, simplified = graphs(fn, *inputs, **params)
    state = dict(params)
    want = run_graph(captured, state, [x.clone() for x in inputs])
    got = run_graph(simplified, state, [x.clone() for x in inputs])
    finite = torch.isfinite(want)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got) & ~torch.isnan(want), torch.isinf(want))
    assert torch.allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


def test_special_values_cover_inf_and_nan():
    x = special_values((3, 4))
    assert torch.isnan(x).any() and torch.isinf(x).any() and (x == 0).any()
    assert SPECIAL.numel() <= 12


def test_integer_division_is_not_rewritten():
    """Integer tensors never enter the fuser, so x // 2 and x / 2 on ints keep PyTorch's meaning."""
    captured, simplified = graphs(lambda s, x: (x // 2) + (x / 2), torch.randint(-9, 9, (4, 4)))
    ops = [n.op if n.op != "aten" else n.target for n in simplified.nodes if n.op not in ("input", "param")]
    assert any("div" in op for op in ops if op.startswith("aten"))


def test_log_names_each_rewrite():
    _, simplified = graphs(lambda s, x: F.relu(x * 1.0) / 4.0, torch.randn(3))
    assert any("x*1" in line or "->" in line for line in simplified.log)


def test_counter_update_becomes_one_in_place_add():
    """Batch norm's num_batches_tracked: copy_(p, add(p, 1)) -> add_(p, 1), and the add is gone."""
    from torchweld.ir import Graph, Node, Ref
    from torchweld.simplify.in_place import in_place_update

    p = Node("p5", "param", (), (), "int64", target="bn.num_batches_tracked")
    add = Node("v8", "aten", (Ref("p5"), 1), (), "int64", target="aten.add.Tensor")
    copy = Node("v12", "aten", (Ref("p5"), Ref("v8")), (), "int64", target="aten.copy_.default")
    g = in_place_update(Graph(nodes=(p, add, copy), outputs=()))
    assert [n.target for n in g.nodes] == ["bn.num_batches_tracked", "aten.add_.Tensor"]
    assert g.nodes[1].args == (Ref("p5"), 1)


@pytest.mark.parametrize("fn", [
    lambda s, x: torch.where(x > 0.1, x, torch.zeros_like(x)),
    lambda s, x: torch.maximum(x, torch.full_like(x, -0.5)) * torch.ones_like(x),
    lambda s, x: (x > torch.zeros_like(x)).float() + x,
])
def test_fill_tensors_become_numbers(fn):
    """zeros_like/ones_like/full_like read by a pointwise op turn into constants: one kernel, same values."""
    from helpers import run

    x = special_values((6, 7))
    captured, simplified = graphs(fn, x)
    assert not any("_like" in n.target for n in simplified.nodes)
    want = fn(None, x)
    got = run(simplified, {}, [x])
    assert torch.equal(torch.nan_to_num(got, 7.0), torch.nan_to_num(want, 7.0))
