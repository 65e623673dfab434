"""Our GEMM's two functions per site (`--gemm`): `_<kernel>_ours` launches our kernel, `_<kernel>_library`
runs the aten GEMM and the folded ops in PyTorch; `_tw_gemm` (runtime/gemm_select.py) picks one per device."""
from __future__ import annotations

from torchweld.codegen import torch_expr
from torchweld.codegen.gemm_kernel import built, operands
from torchweld.emit.exprs import aten_line, expr
from torchweld.ir import Kernel, Plan, Ref
from torchweld.plan.gemm_ours import OursGemm


def site_of(k: Kernel, plan: Plan) -> OursGemm:
    return next(s for s in plan.gemm_ours.values() if isinstance(s, OursGemm) and s.kernel.name == k.name)


def gemm_call(k: Kernel, plan: Plan, operand) -> str:
    """Forward's line running kernel `k` (its operands named by `operand`)."""
    outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
    args = ", ".join(operand(a) for a in k.inputs)
    return (f"        {outs} = _tw_gemm(self, {k.name!r}, _{k.name}_ours, _{k.name}_library, {args})"
            f"  # our GEMM {k.anchor} or the library's, checked and timed at the first call")


def gemm_wrappers(k: Kernel, plan: Plan) -> str:
    """`_<kernel>_ours(...)` and `_<kernel>_library(...)`, both taking `k.inputs` and returning its outputs."""
    site = site_of(k, plan)
    nodes = plan.graph.by_name()
    names = {a: expr(Ref(a), nodes) for a in k.inputs}
    params = ", ".join(names.values())
    out = k.outputs[0]
    code = built(site, plan.graph)
    ptr_of = dict(zip(code.args, [names[a] for a in operands(site)] + ["_out"]))
    lines = [f"def _{k.name}_ours({params}):",
             f'    """{k.name}: our GEMM {k.anchor} ({site.op}){" with " + site.folded + " folded in" if site.folded else ""};'
             ' None where this device has no GEMM path."""',
             f"    if not _LIB.tw_gemm_path_{k.name}():", "        return None"]
    for a in k.inputs:  # NOTE: the kernel reads each operand through its captured strides: a copy only where they differ
        n = nodes[a]
        lines.append(f"    {names[a]} = _tw_layout({names[a]}, {tuple(n.shape)!r}, {tuple(n.stride)!r})")
    first = names[k.inputs[0]]
    lines.append(f"    _out = torch.empty({tuple(site.out_shape)!r}, dtype=torch.{site.dtype}, device={first}.device)")
    ptrs = [ptr_of[a] for a in code.args]
    aligned = " and ".join(f"{p}.data_ptr() % 16 == 0" for p in dict.fromkeys(ptrs))
    lines += [f"    _vec = int({aligned})  # TMA and cp.async need 16-byte aligned pointers; 0: the element loader",
              f"    _err = _LIB.tw_launch_{k.name}({', '.join(f'{p}.data_ptr()' for p in ptrs)}, _vec, "
              f"_tw_stream({first}.get_device()))",
              "    if _err:", f"        _tw_fail({k.name!r}, _err)", "    return _out,", "", ""]
    lines += [f"def _{k.name}_library({params}):",
              f'    """{k.name} the library\'s way: the aten GEMM, then the folded ops in PyTorch."""']
    for a in k.inputs:  # NOTE: forward hands an elided view's tensor itself (plan.elided_views): its shape back
        if a in plan.elided_views:
            lines.append(f"    {names[a]} = {names[a]}.view({tuple(nodes[a].shape)!r})")
    for m in k.nodes:
        n = nodes[m]
        if n.op == "aten":
            lines.append(f"    {aten_line(n, nodes)}")
        else:
            lines.append(f"    {m} = {torch_expr(n, [expr(a, nodes) for a in n.args])}")
    lines.append(f"    return {expr(Ref(out), nodes)},")
    return "\n".join(lines)


# The build's flags and cache name, in files with our GEMM: `_tw_gemm_flags()` (runtime/gemm_select.py) adds
# sm_90a's -gencode on a device of compute capability 9.0.
BUILD_EDITS = (('extra_cuda_cflags=["-O3", "-lineinfo"]', 'extra_cuda_cflags=["-O3", "-lineinfo", *_tw_gemm_flags()]'),
               ("hashlib.sha256(_CUDA_SRC.encode())", "hashlib.sha256((_CUDA_SRC + repr(_tw_gemm_flags())).encode())"))


def gemm_build(build: str) -> str:
    """runtime/extension.py's pasted text with the edits above (each must find its text)."""
    for old, new in BUILD_EDITS:
        if build.count(old) != 1:
            raise ValueError(f"runtime/extension.py no longer holds {old!r} once")
        build = build.replace(old, new)
    return build
