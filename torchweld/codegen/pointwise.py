"""CUDA source for fused pointwise kernels, specialised to the captured shapes.

Each kernel comes in two builds: a vector one (16-byte loads and stores, `VEC` elements a thread)
chosen at run time when every pointer is aligned, and a scalar one. The source includes no
PyTorch header, so `nvcc` compiles it anywhere in seconds.
"""
from __future__ import annotations

from math import prod

from torchweld.codegen.common import (ITEMSIZE, STORAGE, THREADS, Launch, compute, header, in_ptr, index_expr, iteration,
                                      operands, params, reach, vec_class)
from torchweld.ir import Graph, Kernel


def vector_width(kernel: Kernel, graph: Graph) -> int:
    """Elements a thread handles: 16 bytes of the widest output, if the size divides evenly."""
    nodes = graph.by_name()
    width = max(ITEMSIZE[nodes[o].dtype] for o in kernel.outputs)
    vec = max(1, 16 // width)
    return vec if prod(kernel.shape) % vec == 0 else 1


def launch(kernel: Kernel, graph: Graph) -> Launch:
    """The vector build's width, and the operands it reads 16 bytes at a time (which must be aligned)."""
    vec = vector_width(kernel, graph)
    wide = [o for o in operands(kernel, graph) if vec > 1 and vec_class(o, vec) in ("full", "contig")]
    return Launch(0, vec, tuple((o.name, ITEMSIZE[o.dtype] * vec) for o in wide))


def source(kernel: Kernel, graph: Graph) -> str:
    """Both builds of one kernel and its `extern "C"` launcher."""
    nodes = graph.by_name()
    ops = operands(kernel, graph)
    vec = vector_width(kernel, graph)
    n = prod(kernel.shape)
    itype = "u" if max([n] + [reach(nodes[o.name]) for o in ops]) < 2**31 else "ull"  # NOTE: a slice reads past n
    ctype_i = "unsigned int" if itype == "u" else "unsigned long long"
    body = [_kernel(kernel, nodes, ops, v, n, itype, ctype_i) for v in sorted({1, vec})]
    head = header(kernel, nodes, f"fuses {len(kernel.nodes)} ops over {iteration(kernel)}")
    return head + "\n".join(body) + _launcher(kernel, nodes, vec, n, ctype_i)


def _kernel(kernel, nodes, ops, vec, n, itype, ctype_i) -> str:
    fname = f"{kernel.name}_v{vec}"
    # NOTE: a runtime batch changes only the element count: dim 0 is outermost, so no index takes it modulo
    count = (f", const {ctype_i} n", f"n / {vec}{itype}" if vec > 1 else "n") if kernel.batch else ("", f"{n // vec}{itype}")
    lines = [f"__global__ void __launch_bounds__({THREADS}) {fname}({params(kernel, nodes)[0]}{count[0]}) {{",
             f"  const {ctype_i} t = ({ctype_i})blockIdx.x * {THREADS}{itype} + threadIdx.x;",
             f"  if (t >= {count[1]}) return;",
             f"  const {ctype_i} i0 = t * {vec}{itype};"]
    classes = {o.name: (vec_class(o, vec) if vec > 1 else "gather") for o in ops}
    for o in ops:
        s, cls, c = STORAGE[o.dtype], classes[o.name], in_ptr(o.name)
        if cls == "full":
            lines.append(f"  const tw_vec<{s}, {vec}> r_{o.name} = *reinterpret_cast<const tw_vec<{s}, {vec}>*>({c} + i0);")
        elif cls == "contig":
            lines.append(f"  const tw_vec<{s}, {vec}> r_{o.name} = *reinterpret_cast<const tw_vec<{s}, {vec}>*>("
                         f"{c} + {index_expr(o.dims, 'i0', itype)});")
        elif cls == "uniform":
            lines.append(f"  const auto r_{o.name} = tw_ld({c}[{index_expr(o.dims, 'i0', itype)}]);")
    for out in kernel.outputs:
        lines.append(f"  tw_vec<{STORAGE[nodes[out].dtype]}, {vec}> w_{out};")
    lines.append("#pragma unroll")
    lines.append(f"  for (int j = 0; j < {vec}; ++j) {{")
    lines.append(f"    const {ctype_i} i = i0 + j;" if any(c == "gather" for c in classes.values()) else "    (void)0;")
    for o in ops:
        cls = classes[o.name]
        ld = {"full": f"tw_ld(r_{o.name}.v[j])", "contig": f"tw_ld(r_{o.name}.v[j])", "uniform": f"r_{o.name}",
              "gather": f"tw_ld({in_ptr(o.name)}[{index_expr(o.dims, 'i', itype)}])"}[cls]
        lines.append(f"    const auto {o.name} = {ld};")
    lines += ["    " + compute(nodes[m]) for m in kernel.nodes]
    for out in kernel.outputs:
        lines.append(f"    w_{out}.v[j] = tw_st<{STORAGE[nodes[out].dtype]}>({out});")
    lines.append("  }")
    for out in kernel.outputs:
        s = STORAGE[nodes[out].dtype]
        lines.append(f"  *reinterpret_cast<tw_vec<{s}, {vec}>*>(out_{out} + i0) = w_{out};")
    lines.append("}\n")
    return "\n".join(lines)


def _launcher(kernel, nodes, vec, n, ctype_i) -> str:
    _, ptrs, call = params(kernel, nodes)
    if kernel.batch:  # NOTE: the element count follows the pointers (ctypes passes it as one more pointer-sized value)
        return "\n".join([
            f'extern "C" int tw_launch_{kernel.name}({ptrs}, unsigned long long n, int vec, void* stream) {{',
            "  cudaStream_t s = (cudaStream_t)stream;",
            *([f"  if (vec && n % {vec}ull == 0) {kernel.name}_v{vec}<<<(unsigned)((n / {vec}ull + {THREADS - 1}ull) / "
               f"{THREADS}ull), {THREADS}, 0, s>>>({call}, ({ctype_i})n);", "  else "] if vec > 1 else ["  "]),
            f"{kernel.name}_v1<<<(unsigned)((n + {THREADS - 1}ull) / {THREADS}ull), {THREADS}, 0, s>>>({call}, ({ctype_i})n);",
            "  return (int)cudaGetLastError();", "}\n"]).replace("\n  else \n", "\n  else ").replace("\n  \n", "\n  ")
    lines = [f'extern "C" int tw_launch_{kernel.name}({ptrs}, int vec, void* stream) {{',
             "  cudaStream_t s = (cudaStream_t)stream;"]
    if vec > 1:
        lines.append(f"  if (vec) {kernel.name}_v{vec}<<<{_blocks(n // vec)}, {THREADS}, 0, s>>>({call});")
        lines.append(f"  else {kernel.name}_v1<<<{_blocks(n)}, {THREADS}, 0, s>>>({call});")
    else:
        lines.append(f"  {kernel.name}_v1<<<{_blocks(n)}, {THREADS}, 0, s>>>({call});")
    lines.append("  return (int)cudaGetLastError();")
    lines.append("}\n")
    return "\n".join(lines)


def _blocks(count: int) -> str:
    return f"{(count + THREADS - 1) // THREADS}u"
