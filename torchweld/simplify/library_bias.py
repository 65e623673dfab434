"""Library epilogues: move a convolution's or addmm's bias into the fused kernel that follows.

PyTorch adds a convolution's bias in a pass of its own after cuDNN, and `addmm` first copies the
bias into the output for cuBLAS to accumulate onto. When only fusible ops read the result, the
library call runs without bias and the add joins the next kernel: one pass over the output fewer.
"""
from __future__ import annotations

from dataclasses import replace

from torchweld.ir import CONVOLUTION, NORM, POINTWISE, POOL, REDUCTION, ROWWISE, VIEWS, Graph, Node, Ref

# Readers that take the bias add into their kernel (as a pointwise op, or a reduction's prologue).
FUSES_A_PROLOGUE = POINTWISE | REDUCTION | ROWWISE | NORM | POOL
# GEMMs that take a bias (scaled by beta, the product by alpha), and the GEMM without it.
SCALED_GEMMS = {"aten.addmm.default": "aten.mm.default", "aten.baddbmm.default": "aten.bmm.default"}


def _readers_fuse(name: str, users: dict, nodes: dict) -> bool:
    """Something reads `name`, and every reader is a kernel that can add the bias on its way in."""
    readers = users[name]
    return bool(readers) and all(u != "<output>" and nodes[u].op in FUSES_A_PROLOGUE for u in readers)


def _bias_view(root: Node, bias: Node, ndim: int, channel_dim: int) -> Node:
    """`bias.view(C, 1, ..., 1)`: the bias aligned to the channel dim under right-aligned broadcasting."""
    shape = (bias.shape[0],) + (1,) * (ndim - channel_dim - 1)
    return Node(f"{root.name}_bias", "aten", (Ref(bias.name), list(shape)), shape, bias.dtype,
                target="aten.view.default", origin=root.origin, stride=(1,) * len(shape))


def fold_library_bias(graph: Graph) -> Graph:
    """Each conv, addmm or baddbmm whose readers all fuse runs without its bias; the add joins them."""
    nodes, users = graph.by_name(), graph.users()
    out, log = [], []
    moved: dict[str, list[Node]] = {}  # a view's name -> the bias add to place right after it
    for n in graph.nodes:
        if n.op == "aten" and n.target == CONVOLUTION and isinstance(n.args[2], Ref) \
                and _readers_fuse(n.name, users, nodes) and n.dtype == nodes[n.args[2]].dtype:
            lib = replace(n, name=f"{n.name}_lib", args=n.args[:2] + (None,) + n.args[3:])
            view = _bias_view(n, nodes[n.args[2]], len(n.shape), 1)
            out += [lib, view, replace(n, op="add", args=(Ref(lib.name), Ref(view.name)), target="", attrs=())]
            log.append(f"fold_library_bias: {n.name} = convolution(bias=None) + {n.args[2]}  (bias joins the next kernel)")
            continue
        if n.op == "aten" and n.target in SCALED_GEMMS and isinstance(n.args[0], Ref) and n.attr("beta", 1) != 0:
            bias = nodes[n.args[0]]
            chain = _view_chain(n, users, nodes) if n.target == "aten.addmm.default" else [n]
            # NOTE: fp32/fp64 only: in fp16/bf16 the product would round once before the bias instead
            # of after it, a difference a following norm magnifies past the dtype's tolerance.
            if bias.dtype == n.dtype and n.dtype in ("float32", "float64") and _readers_fuse(chain[-1].name, users, nodes) \
                    and (len(bias.shape) == 1 or chain[-1] is n and _broadcasts(bias.shape, n.shape)):
                last = chain[-1]
                gemm = replace(n, target=SCALED_GEMMS[n.target], args=(n.args[1], n.args[2]), attrs=())
                if last is n:
                    gemm = replace(gemm, name=f"{n.name}_lib")
                    out += [gemm, *_scaled_add(n, gemm.name, bias)]
                else:  # mm -> views -> add: the bias runs along the last dim, which the views keep
                    out.append(gemm)
                    moved[last.name] = [replace(last, name=f"{last.name}_lib"),
                                        *_scaled_add(replace(last, attrs=n.attrs), f"{last.name}_lib", bias)]
                what = SCALED_GEMMS[n.target].split(".")[1]
                log.append(f"fold_library_bias: {n.name} = {_scaled_text(n, what, bias.name)}  (bias joins the next kernel)")
                continue
        if n.name in moved:
            out += moved.pop(n.name)
            continue
        out.append(n)
    return replace(graph, nodes=tuple(out)).with_log(*log) if log else graph


def _broadcasts(small: tuple, big: tuple) -> bool:
    """`small` broadcasts to `big` (right-aligned, each dim equal or 1) without growing it."""
    return len(small) <= len(big) and all(a in (1, b) for a, b in zip(reversed(small), reversed(big)))


def _scaled_add(n: Node, gemm: str, bias: Node) -> list[Node]:
    """Nodes computing `n` = beta * bias + alpha * gemm (n's attrs), the last one named as `n`.

    The scales are applied as cuBLAS applies them, in the accumulator's precision after the product:
    alpha to the product, beta to the bias, then one add; a scale of 1 is left out."""
    alpha, beta = n.attr("alpha", 1), n.attr("beta", 1)
    nodes, a, b = [], Ref(gemm), Ref(bias.name)
    if alpha != 1:
        nodes.append(replace(n, name=f"{n.name}_alpha", op="mul", args=(a, alpha), target="", attrs=()))
        a = Ref(nodes[-1].name)
    if beta != 1:
        # NOTE: the scaled bias has the bias's own shape (a broadcast operand of the add, as before).
        nodes.append(replace(bias, name=f"{n.name}_beta", op="mul", args=(b, beta), target="", attrs=(),
                             origin=n.origin))
        b = Ref(nodes[-1].name)
    return nodes + [replace(n, op="add", args=(a, b), target="", attrs=())]


def _scaled_text(n: Node, what: str, bias: str) -> str:
    alpha, beta = n.attr("alpha", 1), n.attr("beta", 1)
    return f"{'' if alpha == 1 else f'{alpha} * '}{what} + {'' if beta == 1 else f'{beta} * '}{bias}"


def _view_chain(n: Node, users: dict, nodes: dict) -> list[Node]:
    """n, then the views that alone read it, as long as each keeps the last dim."""
    chain = [n]
    while True:
        readers = users[chain[-1].name]
        if len(readers) != 1 or readers[0] == "<output>":
            return chain
        nxt = nodes[readers[0]]
        if nxt.op != "aten" or nxt.target not in VIEWS or not nxt.shape or nxt.shape[-1] != n.shape[-1]:
            return chain
        chain.append(nxt)
