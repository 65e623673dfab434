"""Our convolution's two functions per site (`--conv-ours`): `_<kernel>_ours` launches our kernel,
`_<kernel>_library` runs torch.convolution (in a memory format the picker names) and the folded ops
in PyTorch; `_tw_convk` (runtime/conv_select.py) picks one per site and device at the first call."""
from __future__ import annotations

from torchweld.codegen import torch_expr
from torchweld.codegen.conv_kernel import built, operands
from torchweld.emit.exprs import aten_line, expr
from torchweld.ir import Kernel, Plan, Ref
from torchweld.plan.conv_ours import OursConv


def site_of(k: Kernel, plan: Plan) -> OursConv:
    return next(s for s in plan.conv_ours.values() if isinstance(s, OursConv) and s.kernel.name == k.name)


def conv_call(k: Kernel, plan: Plan, operand) -> str:
    """Forward's line running kernel `k` (its operands named by `operand`)."""
    outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
    args = ", ".join(operand(a) for a in k.inputs)
    return (f"        {outs} = _tw_convk(self, {k.name!r}, _{k.name}_ours, _{k.name}_library, {args})"
            f"  # our convolution {k.anchor} or cuDNN's (either layout), checked and timed at the first call")


def conv_wrappers(k: Kernel, plan: Plan) -> str:
    """`_<kernel>_ours(module, ...)` and `_<kernel>_library(module, fmt, ...)`, both taking `k.inputs`
    and returning its outputs."""
    site = site_of(k, plan)
    nodes = plan.graph.by_name()
    names = {a: expr(Ref(a), nodes) for a in k.inputs}
    params = ", ".join(names.values())
    conv = nodes[k.anchor]
    code = built(site, plan.graph)
    folds = " and ".join(x for x in (site.folded, site.also) if x)
    ptr_of = {"x": "_x", "w": "_w", **dict(zip(code.args[2:], [names[a] for a in operands(site)[2:]])),
              "out": "_out", "ws": "_ws", "red": "_red" if site.also else "_out"}  # NOTE: a pixel reduction's result
    lines = [f"def _{k.name}_ours(module, {params}):",
             f'    """{k.name}: our convolution {k.anchor}{" with " + folds + " folded in" if folds else ""};'
             ' None where this device has no path."""',
             f"    if not _LIB.tw_conv_path_{k.name}():", "        return None",
             f"    _x = _tw_channels_last({names[site.x]})  # NOTE: the kernel gathers channels-last input",
             f"    _w = _tw_conv_packed(module, {k.name!r}, {names[site.w]}, {site.groups}, {site.transposed})"]
    for a in operands(site)[2:]:  # NOTE: read through their captured strides: a copy only where they differ
        n = nodes[a]
        lines.append(f"    {names[a]} = _tw_layout({names[a]}, {tuple(n.shape)!r}, {tuple(n.stride)!r})")
    ptrs = [ptr_of[a] for a in code.args]
    aligned = " and ".join(f"{p}.data_ptr() % 16 == 0" for p in ("_x", "_w"))
    full = tuple(k.shape) if site.also else tuple(site.out_shape)  # NOTE: `also`: the full output, then the reduced one
    lines += [f"    _out = torch.empty({full!r}, dtype=torch.{site.dtype}, device=_x.device)"]
    if site.also:
        lines += [f"    _red = torch.empty({tuple(site.out_shape)!r}, dtype=torch.{site.dtype}, device=_x.device)"]
    if "ws" in code.args:
        lines += [f"    _ws = torch.empty(({code.plan.ws},), dtype=torch.float32, device=_x.device)"
                  "  # per-tile partials of the reduction"]
    lines += [f"    _vec = int({aligned})  # cp.async needs 16-byte aligned pointers; 0: the element gather",
              f"    _err = _LIB.tw_launch_{k.name}({', '.join(f'{p}.data_ptr()' for p in ptrs)}, _vec, "
              f"_tw_stream(_x.get_device()))",
              "    if _err:", f"        _tw_fail({k.name!r}, _err)", "    return _out, _red" if site.also else "    return _out,",
              "", ""]
    rest = ", ".join(expr(a, nodes) for a in conv.args[2:])
    lines += [f"def _{k.name}_library(module, fmt, {params}):",
              f'    """{k.name} cuDNN\'s way, input and weight in memory format `fmt` (None: as given), then the folded ops."""']
    for a in k.inputs:  # NOTE: forward hands an elided view's tensor itself (plan.elided_views): its shape back
        if a in plan.elided_views:
            lines.append(f"    {names[a]} = {names[a]}.view({tuple(nodes[a].shape)!r})")
    lines.append(f"    {conv.name} = _tw_conv_lib(module, {k.name!r}, fmt, {expr(conv.args[0], nodes)}, "
                 f"{expr(conv.args[1], nodes)}, {rest})")
    for m in k.nodes[1:]:
        n = nodes[m]
        lines.append(f"    {aten_line(n, nodes)}" if n.op == "aten" else f"    {m} = {torch_expr(n, [expr(a, nodes) for a in n.args])}")
    outs = [expr(Ref(o), nodes) for o in k.outputs]
    lines.append(f"    return {' '.join(f'({o} if fmt is None else {o}.contiguous()),' for o in outs)}")
    return "\n".join(lines)
