"""Weight packing: a GEMM reading a 2-D parameter transposed (a linear's `W.t()`) reads instead a
copy laid out (in, out), made once per version and address of the parameter.

cuBLAS then runs the NN form of the GEMM, which was measured faster than the TN form of `W.t()`
(docs/benchmarks.md, "Packed weights", has the figures). The copy costs the weight's memory once
more; an in-place update or load_state_dict packs again (`_tw_pack` in runtime/pack.py). The product
is the same up to the summation order of the GEMM kernel cuBLAS picks, as with any other cuBLAS
kernel choice.
"""
from __future__ import annotations

from torchweld.ir import Graph, Ref

# GEMMs and the argument index of their second matrix (the (in, out) operand).
MAT2 = {"aten.mm.default": 1, "aten.addmm.default": 2, "aten.matmul.default": 1}
TRANSPOSES = ("aten.t.default", "aten.transpose.int", "aten.permute.default")


def packed_weights(graph: Graph) -> dict[str, str]:
    """{transpose node: parameter} for each 2-D parameter's transpose read only as a GEMM's second matrix."""
    nodes, users = graph.by_name(), graph.users()
    out = {}
    for n in graph.nodes:
        if n.op != "aten" or n.target not in TRANSPOSES or not n.args or not isinstance(n.args[0], Ref):
            continue
        p = nodes[n.args[0]]
        if p.op != "param" or len(p.shape) != 2 or not _swaps(n) or tuple(p.stride) not in ((p.shape[1], 1), ()):
            continue
        readers = users[n.name]
        if readers and all(r != "<output>" and _reads_as_mat2(nodes[r], n.name) for r in readers):
            out[n.name] = p.name
    return out


def _reads_as_mat2(gemm, name: str) -> bool:
    """`gemm` is a GEMM reading `name` as its second matrix and nowhere else."""
    i = MAT2.get(gemm.target) if gemm.op == "aten" else None
    return i is not None and len(gemm.args) > i and gemm.args[i] == name and name not in (
        a for j, a in enumerate(gemm.args) if j != i)


def _swaps(n) -> bool:
    """`n` swaps the two dims of a 2-D tensor."""
    if n.target == "aten.t.default":
        return True
    if n.target == "aten.transpose.int":
        return len(n.args) == 3 and {n.args[1] % 2, n.args[2] % 2} == {0, 1}
    return len(n.args) == 2 and [d % 2 for d in n.args[1]] == [1, 0]
