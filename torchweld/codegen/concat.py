"""CUDA source for torch.cat with its epilogue: one thread per element of the result, which reads the
element from the part its position along the cat dim falls in (at that part's strides) and writes it,
and the epilogue's values, once."""
from __future__ import annotations

from math import prod

from torchweld.codegen.common import (STORAGE, PointwiseLines, anchored_header, blocks_of, dedupe_loads, in_ptr,
                                      kernel_with_launcher, outer, split_at_anchor)
from torchweld.ir import Graph, Kernel
from torchweld.tiling import own_strides

NT = 256


def source(k: Kernel, graph: Graph) -> str:
    """One concatenation kernel and its `extern "C"` launcher."""
    nodes = graph.by_name()
    return anchored_header(k, nodes) + _kernel(k, nodes)


def traffic(k: Kernel, graph: Graph) -> str:
    return "one pass"


def _kernel(k: Kernel, nodes) -> str:
    a = nodes[k.anchor]
    shape, d = tuple(a.shape), a.attr("dim")
    n = prod(shape)
    strides = {p: own_strides(nodes[p].shape, nodes[p].stride) for p in a.args}  # NOTE: none captured: contiguous
    reach = max([n] + [sum((e - 1) * st for e, st in zip(nodes[p].shape, strides[p])) + 1 for p in a.args])
    itype = "ull" if reach >= 2**31 else "u"  # NOTE: a part read through its strides may reach past the result's size
    IT = "unsigned long long" if itype == "ull" else "unsigned int"
    _, epilogue = split_at_anchor(k, nodes)
    body = [f"  const {IT} idx = ({IT})blockIdx.x * {NT}{itype} + threadIdx.x;",
            f"  if (idx >= {outer(k, n, itype)}) return;"]
    for j, size in enumerate(shape):  # NOTE: the element's coordinates in the result
        inner = prod(shape[j + 1:])
        div = f"idx / {inner}{itype}" if inner > 1 else "idx"
        body.append(f"  const {IT} c{j} = {'(' + div + ') % ' + str(size) + itype if j else div};")
    body.append("  float v;")
    start = 0
    parts = list(a.args)
    for i, p in enumerate(parts):
        part = nodes[p]
        size = part.shape[d]
        coords = [f"(c{j} - {start}{itype})" if j == d and start else f"c{j}" for j in range(len(shape))]
        at = " + ".join(f"{c} * {s}{itype}" for c, s, extent in zip(coords, strides[p], part.shape) if extent > 1) \
            or f"0{itype}"
        test = f"if (c{d} < {start + size}{itype}) " if i < len(parts) - 1 else ""
        body.append(f"  {'else ' if i else ''}{test}v = tw_ld({in_ptr(p)}[{at}]);")
        start += size
    lines = [f"const float {a.name} = v;"] + PointwiseLines(k, nodes, itype).lines(epilogue, shape, "idx",
                                                                                  have=frozenset(parts))
    lines += [f"out_{o}[idx] = tw_st<{STORAGE[nodes[o].dtype]}>({o});" for o in k.outputs]
    body += ["  " + line for line in dedupe_loads(lines)]
    return kernel_with_launcher(k, nodes, body, NT, blocks_of(k, n, NT))
