"""The plan as Python, for `explain`: library calls as they are, each kernel as one call."""
from __future__ import annotations

from torchweld.ir import LIBRARY, Plan, format_node
from torchweld.plan.gemm_sites import describe_decision


def describe(plan: Plan) -> str:
    """The plan as Python: library calls as they are, each kernel as one call, ops underneath."""
    nodes = plan.graph.by_name()
    lt = plan.gemm_sites
    lines = ["def forward(...):"]
    for step in plan.steps:
        k = plan.kernel(step)
        if k is None:
            n = nodes[step]
            if n.op in ("input", "param"):
                continue
            note = "  [library]" if n.target in LIBRARY else ""
            lines.append("    " + format_node(n) + note)
            continue
        shape = "x".join(map(str, k.shape))
        lines.append(f"    {', '.join(k.outputs)} = {k.name}({', '.join(k.inputs)})"
                     f"  # fused: {len(k.nodes)} ops over {shape}")
        for m in k.nodes:
            lines.append("        # " + format_node(nodes[m]).split("  #")[0])
        if k.name in lt:
            lines.append("        # " + describe_decision(lt[k.name]))
    outs = ", ".join(plan.graph.outputs)
    lines.append(f"    return {outs}")
    return "\n".join(lines)
