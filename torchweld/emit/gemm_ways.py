"""`_lt_<kernel>`: the GEMM and the kernel after it, run each way its site offers (plan/gemm_sites.py);
`_tw_lt` (runtime/gemm_way_pick.py) times them at the first call and keeps the fastest."""
from __future__ import annotations

from torchweld.emit.exprs import aten_line, expr
from torchweld.ir import Dim, Kernel, Plan, Ref, flat_args
from torchweld.plan.gemm_sites import GemmSite


def gemm_way_args(site: GemmSite, k: Kernel, plan: Plan) -> list[str]:
    """The names `_lt_<kernel>` takes: the GEMM's matrices, the bias and the kernel's other operands, as
    forward names them."""
    nodes, elided = plan.graph.by_name(), plan.elided_views
    made = site.views[-1] if site.views else site.gemm  # inside `_lt_<kernel>`
    sizes = [a.of for v in site.views for a in flat_args(nodes[v].args) if isinstance(a, Dim)]  # read at run time
    return list(dict.fromkeys(expr(Ref(elided.get(a, a)), nodes)
                              for a in (site.mat1, site.mat2, site.bias, *k.inputs, *sizes) if a != made))


def gemm_ways_function(site: GemmSite, k: Kernel, plan: Plan) -> str:
    """`_lt_<kernel>(module, way, ...)`: the GEMM and kernel `k` run one of `site.ways`; returns `k`'s outputs."""
    nodes, elided = plan.graph.by_name(), plan.elided_views

    def operand(a) -> str:
        return expr(Ref(elided.get(a, a)), nodes)

    views = [aten_line(nodes[v], nodes) for v in site.views]
    last = site.views[-1] if site.views else site.gemm
    kernel_args = [operand(a) for a in k.inputs]
    ops = ", ".join(nodes[m].op for m in k.nodes)
    gemm = nodes[site.gemm].target.split(".")[1]
    lines = [f"def _lt_{k.name}(module, way, {', '.join(gemm_way_args(site, k, plan))}):",
             f'    """{site.gemm} = {gemm} then {k.name} ({ops}), run as `way` says: {", ".join(site.ways)} (ours last)."""']
    if "epilogue" in site.ways:
        lines += ['    if way == "epilogue":  # bias and activation in cuBLASLt\'s ' + site.epilogue + " epilogue",
                  f"        {site.gemm} = {site.call(operand)}", *["        " + line for line in views],
                  f"        return {last},"]
    if "addmm" in site.ways:
        zero = [f"_tw_zero(module, {k.name!r}, {operand(site.bias)})" if name == site.bias else arg
                for arg, name in zip(kernel_args, k.inputs)]
        lines += ['    if way == "addmm":  # the GEMM as eager runs a linear; the kernel adds -0.0, which changes nothing',
                  f"        {site.gemm} = {site.addmm_call(operand)}", *["        " + line for line in views],
                  f"        return _{k.name}({', '.join(zero)})"]
    lines += [f"    {aten_line(nodes[site.gemm], nodes)}", *["    " + line for line in views],
              f"    return _{k.name}({', '.join(kernel_args)})"]
    return "\n".join(lines)
