"""ModelNew.forward: its guard, then the plan's steps, each a library call or a kernel's wrapper."""
from __future__ import annotations

import torch

from torchweld.codegen import torch_expr
from torchweld.emit.exprs import aten_line, expr, module_path, state_path
from torchweld.emit.conv_wrapper import conv_call
from torchweld.emit.gemm_ways import gemm_way_args
from torchweld.emit.gemm_wrapper import gemm_call
from torchweld.ir import LIBRARY, Node, Plan, Ref, flat_args, format_node
from torchweld.options import Options, Precision
from torchweld.plan.memory import COPY
from torchweld.simplify.conv_fold import FOLD, describe_stages, fold_call


def guard_conditions(plan: Plan, inputs: list[Node], same_init: bool) -> list[str]:
    """Forward's guard, one condition each: any true one sends the call to the original forward."""
    nodes = plan.graph.by_name()
    tensors = [n for n in inputs if n.attr("value") is None]
    conds = ["not self._tw_same_init"] * same_init + [
        f"{n.target}.shape != {tuple(n.shape)!r} or {n.target}.dtype != torch.{n.dtype}" for n in tensors]
    conds += [f"{n.target} != {n.attr('value')!r}" for n in inputs if n not in tensors]
    if tensors:  # NOTE: kernels launch on the current device: every tensor they read must live there
        first = tensors[0].target
        conds.append(f"not {first}.is_cuda or {first}.get_device() != torch.cuda.current_device()")
        conds += [f"{n.target}.get_device() != {first}.get_device()" for n in tensors[1:]]
        conds += [f"{expr(Ref(p), nodes)}.dtype != torch.{nodes[p].dtype} or "
                  f"{expr(Ref(p), nodes)}.get_device() != {first}.get_device()" for p in plan.guard.params]
        conds += [f"{expr(Ref(p), nodes)}.shape != {tuple(nodes[p].shape)!r}" for p in plan.guard.shapes]
    conds += [f"{module_path(m)}.training is not {t}" for m, t in plan.guard.modes]
    return conds


def _conv_to(handed_on: str | None) -> str:
    """`_tw_conv`'s `to` argument for a convolution whose output is handed on in memory format `handed_on`."""
    if handed_on is None:
        return ", to=None"
    return "" if handed_on == "contiguous_format" else f", to=torch.{handed_on}"


def forward(plan: Plan, inputs: list[Node], signature: str, options: Options = Options(),
            same_init: bool = False) -> list[str]:
    """The lines of ModelNew.forward (and of `_tw_fast`, where the fast path is a CUDA graph)."""
    graph = plan.graph
    nodes, users = graph.by_name(), graph.users()
    elided = plan.elided_views
    timed = plan.timed_gemm_sites
    in_gemm_ways = {m for site in timed.values() for m in (site.gemm, *site.views)}  # made inside `_lt_<kernel>`
    into = plan.written_into

    def operand(a) -> str:
        return expr(Ref(elided.get(a, a)), nodes)

    used = {elided.get(a, a) for step in plan.steps for a in (plan.kernel(step).inputs if plan.kernel(step) else
                                                                (nodes[step].inputs() if step in nodes else ()))}
    state = [n for n in graph.nodes if n.op == "param" and n.name in used]
    tensors = [n for n in inputs if n.attr("value") is None]
    guard = "\n                or ".join(guard_conditions(plan, inputs, same_init)) or "False"
    arg_names = ", ".join(n.target for n in inputs)
    body = [f"    def forward({signature}):",
            *(["        # NOTE: parameters and buffers are fetched once, by dict lookups (`self.conv.weight`"
               " costs microseconds)."] if state else []),
            *[f"        {n.name} = {state_path(n)}  # self.{n.target}" for n in state],
            "        # NOTE: kernels are specialised to the captured shapes; other inputs take the general path.",
            f"        if ({guard}):",
            f"            return self._tw_general({arg_names})"]
    if any(isinstance(a, torch.device) for n in graph.nodes for a in flat_args(n.args + tuple(v for _, v in n.attrs))):
        body.append(f"        _dev = {tensors[0].target}.device" if tensors else "        _dev = torch.device('cuda')")
    for step in plan.steps:
        k = plan.kernel(step)
        if k is not None and k.name in timed:
            site = timed[k.name]
            outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
            args = ", ".join(gemm_way_args(site, k, plan))
            body.append(f"        {outs} = _tw_lt(self, {k.name!r}, _lt_{k.name}, {site.ways!r}, {args})"
                        f"  # library and {k.name}: the fastest of {', '.join(site.ways)}")
            continue
        if k is not None and k.kind == "gemm":
            body.append(gemm_call(k, plan, operand))
            continue
        if k is not None and k.kind == "conv":
            body.append(conv_call(k, plan, operand))
            continue
        if k is not None:
            outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
            args = ", ".join([operand(a) for a in k.inputs] + [operand(into[o][1]) for o in k.outputs if o in into])
            ops = "; ".join(format_node(nodes[m]).split("  #")[0] for m in k.nodes)
            body.append(f"        {outs} = _{k.name}({args})  # {ops}")
            continue
        body += _node_lines(nodes[step], plan, nodes, users, in_gemm_ways)
    outs = [expr(Ref(o), nodes) for o in graph.outputs]
    body.append(f"        return {outs[0] if graph.single_output else '(' + ', '.join(outs) + ',)'}")
    start = body.index(f"            return self._tw_general({arg_names})") + 1
    if options.precision is Precision.TF32:  # the fast path runs with TF32 allowed, and puts the flags back after
        body[start:] = (["        _tw_was = _tw_tf32((True, True))", "        try:"]
                        + ["    " + line for line in body[start:]]
                        + ["        finally:", "            _tw_tf32(_tw_was)"])
    if plan.cuda_graph:  # the fast path becomes a method, replayed as a CUDA graph
        fast_args = ", ".join([n.target for n in inputs] + [n.name for n in state])
        ins = ", ".join(n.target for n in inputs) + ("," if len(inputs) == 1 else "")
        st = ", ".join(n.name for n in state) + ("," if len(state) == 1 else "")
        fast = body[start:]
        body[start:] = [f"        return _tw_graphed(self, ({ins}), ({st}), self._tw_fast)", "",
                        f"    def _tw_fast(self, {fast_args}):",
                        '        """The fast path, captured once as a CUDA graph by `_tw_graphed`."""', *fast]
    return body


def _node_lines(n: Node, plan: Plan, nodes: dict, users: dict, in_gemm_ways: set) -> list[str]:
    """The line (or none) that runs node `n` in PyTorch, as the plan says."""
    if n.op in ("input", "param") or n.name in plan.elided_views or n.name in in_gemm_ways:
        return []
    if n.op == "aten" and n.target == COPY and n.args[1] in plan.written_into:  # the kernel wrote it there
        return [f"        {n.name} = {expr(n.args[0], nodes)}  # written by the kernel that made {n.args[1]}"] \
            if users[n.name] else []
    if n.op == FOLD:
        call = fold_call(n, nodes, users, lambda a: expr(a, nodes))
        return [f"        {call}  # {describe_stages(n.args[2:], nodes)}"]
    if n.op == "getitem" and nodes[n.args[0]].op == FOLD:
        return []  # unpacked by the fold's line
    if n.op == "getitem":
        return [f"        {n.name} = {expr(n.args[0], nodes)}[{n.args[1]!r}]"]
    if n.name in plan.packed_weights:
        p = expr(Ref(plan.packed_weights[n.name]), nodes)
        return [f"        {n.name} = _tw_pack(self, {n.name!r}, {p})  # {p}.t(), laid out (in, out) once per version"]
    if n.name in plan.conv_sites:
        args = ", ".join(expr(a, nodes) for a in n.args)
        site = list(plan.conv_sites).index(n.name)
        handed_on = plan.conv_sites[n.name]
        note = "; channels-last goes on as made" if handed_on is None else ""
        return [f"        {n.name} = _tw_conv(self, {site}, {args}{_conv_to(handed_on)})  # library{note}"]
    if n.op == "aten":
        note = "  # library" if n.target in LIBRARY else ""
        return [f"        {aten_line(n, nodes)}{note}"]
    return [f"        {n.name} = {torch_expr(n, [expr(a, nodes) for a in n.args])}"]
