"""The simplify rule tables, case by case: (input node, expected replacement) pairs, each rewrite checked on
NaN, inf, -0 and huge values, and the cases where a rule must not fire."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from helpers import special_values
from torchweld.interp import run_graph
from torchweld.ir import Graph, Node, Ref, format_node
from torchweld.simplify import simplify
from torchweld.simplify.canonical import CANONICAL
from torchweld.simplify.fill import FILL
from torchweld.simplify.fma import FMA
from torchweld.simplify.functional_copy import FUNCTIONAL_COPY
from torchweld.simplify.identity import IDENTITY
from torchweld.simplify.keepdim import KEEPDIM
from torchweld.simplify.rewrite import Ctx, Num, Pat, Var, apply_rules, rewrite

x, y, z, b, h, i, m = (Ref(v) for v in "xyzbhim")
# The graph's inputs: x, y, z of the result's shape, b broadcast along its last dim, h in fp16, i integer, m a mask.
LEAVES = (
    Node("x", "input", (), (4, 5), "float32", target="x", stride=(5, 1)),
    Node("y", "input", (), (4, 5), "float32", target="y", stride=(5, 1)),
    Node("z", "input", (), (4, 5), "float32", target="z", stride=(5, 1)),
    Node("b", "input", (), (5,), "float32", target="b", stride=(1,)),
    Node("h", "input", (), (4, 5), "float16", target="h", stride=(5, 1)),
    Node("i", "input", (), (4, 5), "int64", target="i", stride=(5, 1)),
    Node("m", "input", (), (4, 5), "bool", target="m", stride=(5, 1)),
)
ALL = {"IDENTITY": IDENTITY, "CANONICAL": CANONICAL, "FMA": FMA, "FILL": FILL, "KEEPDIM": KEEPDIM,
       "FUNCTIONAL_COPY": FUNCTIONAL_COPY}


def op(name, fn, *args, shape=(4, 5), dtype="float32", target="", attrs=()):
    """Node `name = fn(*args)` (fn: an IR op, or an aten target)."""
    if fn.startswith("aten."):
        fn, target = "aten", fn
    return Node(name, fn, tuple(args), shape, dtype, target=target, attrs=attrs, stride=(5, 1)[-len(shape):])


def n(fn, *args, **kw):
    """The node under test, always named `n`."""
    return op("n", fn, *args, **kw)


SUM = op("s", "sum", x, shape=(4,), attrs=(("dims", (1,)), ("keepdim", False)))
FILLS = {"zeros": op("zx", "aten.zeros_like.default", x), "ones": op("ox", "aten.ones_like.default", x),
         "full": op("fx", "aten.full_like.default", x, 2.5),
         "zeros_b": op("zb", "aten.zeros_like.default", b, shape=(5,)),
         "zeros_h": op("zh", "aten.zeros_like.default", h, dtype="float16")}
PRODUCT = op("p", "mul", x, y)

# (rule as written in its table, table, nodes before the one under test, node under test, expected:
#  the name of the value it becomes, or the replacement node's right-hand side)
FIRES = [
    ("x*1 -> x", IDENTITY, [], n("mul", x, 1.0), "x"),
    ("x*1 -> x (an int 1)", IDENTITY, [], n("mul", x, 1), "x"),
    ("1*x -> x", IDENTITY, [], n("mul", 1.0, x), "x"),
    ("x+0 -> x", IDENTITY, [], n("add", x, 0.0), "x"),
    ("x+0 -> x (x + -0.0)", IDENTITY, [], n("add", x, -0.0), "x"),
    ("x-0 -> x", IDENTITY, [], n("sub", x, 0.0), "x"),
    ("x/1 -> x", IDENTITY, [], n("div", x, 1.0), "x"),
    ("x**1 -> x", IDENTITY, [], n("pow", x, 1.0), "x"),
    ("x.to(x.dtype) -> x", IDENTITY, [], n("cast", x), "x"),
    ("--x -> x", IDENTITY, [op("g", "neg", x)], n("neg", Ref("g")), "x"),
    ("relu(relu(x)) -> relu(x)", IDENTITY, [op("r", "relu", x)], n("relu", Ref("r")), "r"),
    ("x/c -> x*(1/c)", CANONICAL, [], n("div", x, 4.0), "mul(x, 0.25)"),
    ("x/c -> x*(1/c) (c < 0)", CANONICAL, [], n("div", x, -2.0), "mul(x, -0.5)"),
    ("x-c -> x+(-c)", CANONICAL, [], n("sub", x, 3.0), "add(x, -3.0)"),
    ("c+x -> x+c", CANONICAL, [], n("add", 2.0, x), "add(x, 2.0)"),
    ("c*x -> x*c", CANONICAL, [], n("mul", 2.0, x), "mul(x, 2.0)"),
    ("c*x -> x*c (c = 0: still a product, NaN for an infinite x)", CANONICAL, [], n("mul", 0.0, x), "mul(x, 0.0)"),
    ("x**2 -> x*x", CANONICAL, [], n("pow", x, 2.0), "mul(x, x)"),
    ("square(x) -> x*x", CANONICAL, [], n("square", x), "mul(x, x)"),
    ("a*b + c -> fma(a, b, c)", FMA, [PRODUCT], n("add", Ref("p"), z), "fma(x, y, z)"),
    ("c + a*b -> fma(a, b, c)", FMA, [PRODUCT], n("add", z, Ref("p")), "fma(x, y, z)"),
    ("a*b + c -> fma(a, b, c) (c a number)", FMA, [PRODUCT], n("add", Ref("p"), 1.0), "fma(x, y, 1.0)"),
    ("where(c, x, zeros_like(x)) -> where(c, x, 0.0)", FILL, [FILLS["zeros"]], n("where", m, x, Ref("zx")),
     "where(m, x, 0.0)"),
    ("x * ones_like(x) -> x * 1.0", FILL, [FILLS["ones"]], n("mul", x, Ref("ox")), "mul(x, 1.0)"),
    ("maximum(x, full_like(x, 2.5)) -> maximum(x, 2.5)", FILL, [FILLS["full"]], n("maximum", x, Ref("fx")),
     "maximum(x, 2.5)"),
    ("x + zeros_like(b) -> x + 0.0 (a fill that broadcasts)", FILL, [FILLS["zeros_b"]], n("add", x, Ref("zb")),
     "add(x, 0.0)"),
    ("x > zeros_like(x) -> x > 0.0", FILL, [FILLS["zeros"]], n("gt", x, Ref("zx"), dtype="bool"), "gt(x, 0.0)"),
    ("x.sum(1)[:, None] -> x.sum(1, keepdim=True)", KEEPDIM, [SUM],
     n("aten.unsqueeze.default", Ref("s"), 1, shape=(4, 1)), "sum(x, dims=[1], keepdim=True)"),
    ("x.sum(1).view(4, 1) -> x.sum(1, keepdim=True)", KEEPDIM, [SUM],
     n("aten.view.default", Ref("s"), [4, 1], shape=(4, 1)), "sum(x, dims=[1], keepdim=True)"),
    ("copy(p, v) -> v", FUNCTIONAL_COPY, [], n("aten.copy.default", z, x), "x"),
]

# (why the rule must not fire, node before, node under test): no table rewrites it.
STAYS = [
    ("x*0 is NaN for an infinite or NaN x, not 0", [], n("mul", x, 0.0)),
    ("x/0: 0 has no reciprocal", [], n("div", x, 0.0)),
    ("x/inf: the rule keeps to finite divisors", [], n("div", x, math.inf)),
    ("x/nan: the rule keeps to finite divisors", [], n("div", x, math.nan)),
    ("x**0 is 1 even for NaN: no rule claims it", [], n("pow", x, 0.0)),
    ("x*1 that broadcasts: b*1 has the result's shape, b has not", [], n("mul", b, 1.0)),
    ("x+0 that promotes: h+0 is fp32, h is fp16", [], n("add", h, 0.0)),
    ("a cast that changes the dtype", [], n("cast", h)),
    ("integer tensors keep PyTorch's integer semantics", [], n("mul", i, 1.0, dtype="int64")),
    ("integer division is not a product", [], n("div", i, 2.0, dtype="int64")),
    ("a bool is a flag, not the number 1", [], n("mul", x, True)),
    ("x-y: no constant", [], n("sub", x, y)),
    ("x**3 is not x*x*x in floating point", [], n("pow", x, 3.0)),
    ("-x alone", [], n("neg", x)),
    ("a product read twice stays a product", [PRODUCT, op("q", "exp", Ref("p"))], n("add", Ref("p"), z)),
    ("an fp16 product in an fp32 sum rounds in fp16 first", [op("p", "mul", h, h, dtype="float16")],
     n("add", Ref("p"), z)),
    ("a fill in another dtype is a cast as well", [FILLS["zeros_h"]], n("add", x, Ref("zh"))),
    ("where's condition stays a tensor", [op("zm", "aten.zeros_like.default", m, dtype="bool")],
     n("where", Ref("zm"), x, y)),
    ("a view to another shape than keepdim's", [SUM], n("aten.view.default", Ref("s"), [2, 2], shape=(2, 2))),
    ("a copy into other strides", [], replace(n("aten.copy.default", z, x), stride=(1, 4))),
]


def _graph(before: list[Node], node: Node) -> Graph:
    return Graph(LEAVES + tuple(before) + (node,), (node.name,))


def _rhs(out) -> str:
    return str(out) if isinstance(out, Ref) else format_node(out).split("  #")[0].split(" = ", 1)[1]


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    out = []
    for leaf in LEAVES:
        if leaf.dtype == "int64":
            out.append(torch.randint(-9, 9, leaf.shape))
        elif leaf.dtype == "bool":
            out.append(torch.rand(leaf.shape) > 0.5)
        else:
            out.append(special_values(leaf.shape).to(getattr(torch, leaf.dtype)))
    return out


def _same_values(got: torch.Tensor, want: torch.Tensor):
    """Equal where the reference is finite; NaN and inf exactly where the reference has them."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if not want.is_floating_point():
        assert torch.equal(got, want)
        return
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    inf = torch.isinf(want)
    assert torch.equal(torch.isinf(got), inf) and torch.equal(got[inf], want[inf])
    finite = torch.isfinite(want)
    assert torch.allclose(got[finite], want[finite], rtol=1e-6, atol=0)


@pytest.mark.parametrize("rule,table,before,node,expected", FIRES, ids=[c[0] for c in FIRES])
def test_rule_fires(rule, table, before, node, expected):
    g = _graph(before, node)
    out = rewrite(table, node, Ctx(g))
    assert out is not None and _rhs(out) == expected


@pytest.mark.parametrize("rule,table,before,node,expected", FIRES, ids=[c[0] for c in FIRES])
def test_rule_keeps_nan_inf_and_values(rule, table, before, node, expected):
    """The graph after the rule computes what it did before, on inf, -inf, NaN, -0, subnormal and huge inputs."""
    g = _graph(before, node)
    after = apply_rules(g, [table], "rule")
    assert after.log, rule
    _same_values(run_graph(after, {}, _inputs()), run_graph(g, {}, _inputs()))


@pytest.mark.parametrize("why,before,node", STAYS, ids=[c[0] for c in STAYS])
def test_rule_does_not_fire(why, before, node):
    ctx = Ctx(_graph(before, node))
    fired = {name: _rhs(out) for name, table in ALL.items() if (out := rewrite(table, node, ctx)) is not None}
    assert fired == {}


def test_x_times_zero_survives_every_pass():
    """x*0 -> 0 would be wrong for inf and NaN: the whole simplify keeps the product."""
    g = simplify(_graph([], n("mul", x, 0.0)))
    assert [_rhs(node) for node in g.nodes if node.is_pointwise] == ["mul(x, 0.0)"]


# (input graph: nodes after the leaves, the output), the pointwise nodes simplify leaves.
GRAPHS = [
    ("relu(relu(x*1)) -> relu(x)", [op("a", "mul", x, 1.0), op("r", "relu", Ref("a"))], n("relu", Ref("r")),
     ["relu(x)"]),
    ("x/4 - 1 -> fma(x, 0.25, -1)", [op("a", "div", x, 4.0)], n("sub", Ref("a"), 1.0), ["fma(x, 0.25, -1.0)"]),
    ("x + x + y -> fma(x, 2, y)", [op("a", "add", x, x)], n("add", Ref("a"), y), ["fma(x, 2.0, y)"]),
    ("2*x - x*2 -> (x*2)*0 (kept: NaN for inf)", [op("a", "mul", 2.0, x), op("c", "mul", x, 2.0)],
     n("sub", Ref("a"), Ref("c")), ["mul(x, 2.0)", "mul(a, 0.0)"]),
    ("exp(x) + exp(x) -> exp(x)*2", [op("a", "exp", x), op("c", "exp", x)], n("add", Ref("a"), Ref("c")),
     ["exp(x)", "mul(a, 2.0)"]),
]


@pytest.mark.parametrize("rule,before,node,expected", GRAPHS, ids=[c[0] for c in GRAPHS])
def test_simplify_graph(rule, before, node, expected):
    g = _graph(before, node)
    after = simplify(g)
    assert [_rhs(a) for a in after.nodes if a.is_pointwise] == expected, str(after)
    _same_values(run_graph(after, {}, _inputs()), run_graph(g, {}, _inputs()))


# --- the matcher itself ---------------------------------------------------------------------

def test_a_name_bound_twice_must_see_one_value():
    pat = Pat("mul", (Var("a"), Var("a")))
    table = ((pat, lambda node, ctx, a: a),)
    ctx = Ctx(_graph([], n("mul", x, y)))
    assert rewrite(table, n("mul", x, x), ctx) == "x"
    assert rewrite(table, n("mul", x, y), ctx) is None


def test_a_nested_pattern_needs_a_node_and_arity_must_match():
    table = ((Pat("neg", (Pat("neg", name="inner"),)), lambda node, ctx, inner: inner),)
    ctx = Ctx(_graph([op("g", "neg", x)], n("neg", Ref("g"))))
    assert rewrite(table, n("neg", Ref("g")), ctx) == "g"
    assert rewrite(table, n("neg", 2.0), ctx) is None
    assert rewrite(((Pat("mul", (Var("a"),)), lambda node, ctx, a: a),), n("mul", x, y), ctx) is None


def test_a_rule_that_gives_nothing_falls_through_to_the_next():
    table = ((Pat("mul", (Var("a"), Num(name="c"))), lambda node, ctx, a, c: None),
             (Pat("mul", (Var("a"), Num(1.0))), lambda node, ctx, a: a))
    ctx = Ctx(_graph([], n("mul", x, 1.0)))
    assert rewrite(table, n("mul", x, 1.0), ctx) == "x"


# --- the package's shape ---------------------------------------------------------------------

def _simplify_imports() -> dict[str, set[str]]:
    """Each module of torchweld/simplify/ -> the simplify modules it imports (anywhere in the file)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "torchweld" / "simplify"
    out = {}
    for path in sorted(root.glob("*.py")):
        name = "torchweld.simplify" + ("" if path.stem == "__init__" else f".{path.stem}")
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchweld.simplify"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("torchweld.simplify"))
        out[name] = found
    return out


def test_no_pass_imports_the_package_and_no_cycle():
    graph = _simplify_imports()
    assert not [m for m, deps in graph.items() if m != "torchweld.simplify" and "torchweld.simplify" in deps]
    seen, done = set(), set()

    def visit(m, path):
        assert m not in seen or m in done, f"import cycle: {' -> '.join(path + [m])}"
        if m in done:
            return
        seen.add(m)
        for d in graph.get(m, ()):
            visit(d, path + [m])
        done.add(m)

    for m in graph:
        visit(m, [])
