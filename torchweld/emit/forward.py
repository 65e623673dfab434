"""ModelNew.forward: its guard, then the plan's steps, each a library call or a kernel's wrapper."""
from __future__ import annotations

import ast

import torch

from torchweld.codegen import torch_expr
from torchweld.emit.conv_wrapper import conv_call
from torchweld.emit.exprs import aten_line, expr, module_path, state_attr, state_path
from torchweld.emit.gemm_ways import gemm_way_args
from torchweld.emit.gemm_wrapper import gemm_call
from torchweld.ir import LIBRARY, Node, Plan, Ref, flat_args, format_node
from torchweld.options import Options, Precision
from torchweld.plan.held import held_outputs
from torchweld.plan.memory import COPY
from torchweld.simplify.conv_fold import FOLD, describe_stages, fold_call


def guard_conditions(plan: Plan, inputs: list[Node], same_init: bool, fetched: frozenset = frozenset()) -> list[str]:
    """Forward's guard, one condition each: any true one sends the call to the original forward.

    `fetched`: the parameters forward has already fetched into locals of their node names."""
    nodes = plan.graph.by_name()
    tensors = [n for n in inputs if n.attr("value") is None]
    conds = ["not self._tw_same_init"] * same_init + [
        f"{_shape_test(n, plan)} or {n.target}.dtype != torch.{n.dtype}" for n in tensors]
    if plan.guard.batch and tensors:  # NOTE: the batch is a runtime size: the same in every input, 1 to the largest
        first = tensors[0].target
        # NOTE: with the sequence, the tokens (batch times sequence length) are bounded, and both are the same everywhere
        lead = 1 + bool(plan.guard.seq)
        conds.append(f"not 0 < {' * '.join(f'{first}.shape[{i}]' for i in range(lead))} <= {plan.guard.batch[1]}")
        conds += [f"{n.target}.shape[{i}] != {first}.shape[{i}]" for n in tensors[1:] for i in range(lead)]
    conds += [f"{n.target} != {n.attr('value')!r}" for n in inputs if n not in tensors]
    if tensors:  # NOTE: kernels launch on the current device: every tensor they read must live there
        first = tensors[0].target
        conds.append(f"not {first}.is_cuda or {first}.get_device() != torch.cuda.current_device()")
        conds += [f"{n.target}.get_device() != {first}.get_device()" for n in tensors[1:]]
        conds += [f"{expr(Ref(p), nodes)}.dtype != torch.{nodes[p].dtype} or "
                  f"{expr(Ref(p), nodes)}.get_device() != {first}.get_device()" for p in plan.guard.params]
        conds += [f"{expr(Ref(p), nodes)}.shape != {tuple(nodes[p].shape)!r}" for p in plan.guard.shapes]
    conds += [f"{module_path(m)}.training is not {t}" for m, t in plan.guard.modes]
    grads = [f"{n.target}.requires_grad" for n in tensors]
    grads += [f"{p if p in fetched else state_path(nodes[p])}.requires_grad" for p in plan.guard.grads]
    if grads:  # NOTE: kernels register no backward: where autograd would record the call, the original runs
        conds.append("torch.is_grad_enabled() and (" + "\n                    or ".join(
            " or ".join(grads[i:i + 4]) for i in range(0, len(grads), 4)) + ")")
    return conds


def _uncaptured(signature: str, inputs: list[Node]) -> tuple[list[str], str]:
    """(guard conditions, `_tw_general`'s arguments): forward's parameters the trace was not given (their
    defaults) must still have their default values for the kernels to run, and reach the original forward."""
    args = ast.parse(f"def forward({signature}): pass").body[0].args
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    captured = {n.target for n in inputs}
    conds = []
    for name, default in defaults.items():
        if name in captured:
            continue
        try:
            value = ast.literal_eval(default)
        except ValueError:
            value = ...
        if value is None or isinstance(value, bool):
            conds.append(f"{name} is not {value!r}")
        elif isinstance(value, (int, float, str)) and repr(value) == ast.unparse(default):
            conds.append(f"{name}.__class__ is not {type(value).__name__} or {name} != {value!r}")
        else:  # NOTE: a default that is no constant: any call may change it, so the kernels never run
            conds.append("True")
    names = [a.arg for a in positional[1:]] + [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if not set(defaults) - captured:  # NOTE: every parameter captured: the call stays as it was
        names = [n.target for n in inputs]
    return conds, ", ".join(names)


def _shape_test(n: Node, plan: Plan) -> str:
    """The guard's test of input `n`'s shape: every dim, or those after the batch (and the sequence) where it
    is a runtime size."""
    if plan.guard.seq:  # NOTE: a test of the rank too: `x.shape[2:]` of a 2-dim input is ()
        return f"{n.target}.dim() != 3 or {n.target}.shape[2:] != {tuple(n.shape[2:])!r}"
    if plan.guard.batch:
        return f"{n.target}.shape[1:] != {tuple(n.shape[1:])!r}"
    return f"{n.target}.shape != {tuple(n.shape)!r}"


def _note_lines(tensors: list[Node], plan: Plan) -> list[str]:
    """The fallback's warning, once per module, where an input's shape is not the kernels' (runtime/shape_note.py)."""
    if not tensors:
        return []
    batch = bool(plan.guard.batch) + bool(plan.guard.seq)
    built = ", ".join(f"({n.target!r}, {n.target}, {((None,) * batch + tuple(n.shape[batch:]))!r})" for n in tensors)
    return ['            if "_tw_warned" not in self.__dict__:',
            f"                _tw_shape_note(self, ({built},))"]


def _conv_to(handed_on: str | None) -> str:
    """`_tw_conv`'s `to` argument for a convolution whose output is handed on in memory format `handed_on`."""
    if handed_on is None:
        return ", to=None"
    return "" if handed_on == "contiguous_format" else f", to=torch.{handed_on}"


def forward(plan: Plan, inputs: list[Node], signature: str, options: Options = Options(),
            same_init: bool = False, repeats: dict[str, str] | None = None) -> list[str]:
    """The lines of ModelNew.forward (and of `_tw_fast`, where the fast path is a CUDA graph).
    `repeats`: {kernel: the kernel whose code it runs} (emit/repeats.py)."""
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
    fetched = frozenset(n.name for n in state)
    extra, arg_names = _uncaptured(signature, inputs)
    guard = "\n                or ".join(guard_conditions(plan, inputs, same_init, fetched) + extra) or "False"
    body = [f"    def forward({signature}):",
            *(["        # NOTE: parameters and buffers are fetched once, by dict lookups (`self.conv.weight`"
               " costs microseconds)."] if state else []),
            *[f"        {n.name} = {state_path(n)}  # self.{n.target}" for n in state],
            "        # NOTE: kernels are specialised to the captured shapes and register no backward: other inputs,",
            "        # and calls autograd would record, take the general path.",
            f"        if ({guard}):",
            *_note_lines(tensors, plan),
            f"            return self._tw_general({arg_names})"]
    if plan.held or any(isinstance(a, torch.device) for n in graph.nodes
                        for a in flat_args(n.args + tuple(v for _, v in n.attrs))):  # NOTE: `_tw_held` is keyed on it
        body.append(f"        _dev = {tensors[0].target}.device" if tensors else "        _dev = torch.device('cuda')")
    held, held_body = set(plan.held), []
    for step in plan.steps:
        if step in held:  # NOTE: made once, by `_tw_held`, where forward first needs one of them
            if not held_body:
                body.append(_held_call(plan, nodes))
            held_body += _node_lines(nodes[step], plan, nodes, users, in_gemm_ways) or [""]
            continue
        k = plan.kernel(step)
        if k is not None and k.name in timed:
            site = timed[k.name]
            outs = ", ".join(k.outputs) + ("," if len(k.outputs) == 1 else "")
            args = ", ".join(gemm_way_args(site, k, plan))
            code = (repeats or {}).get(k.name, k.name)  # NOTE: a repeat shares its first's timing too
            body.append(f"        {outs} = _tw_lt(self, {code!r}, _lt_{code}, {site.ways!r}, {args})"
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
            body.append(f"        {outs} = _{(repeats or {}).get(k.name, k.name)}({args})  # {ops}")
            continue
        body += _node_lines(nodes[step], plan, nodes, users, in_gemm_ways)
    outs = [expr(Ref(o), nodes) for o in graph.outputs]
    if graph.writes:  # state forward assigns anew, as the original does (capture/state.py)
        body += [f"        {state_attr(t)} = {v}" for t, v in zip(graph.writes, outs[-len(graph.writes):])]
        outs = outs[:-len(graph.writes)]
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
    if held_body:
        body += _held_method(plan, nodes, [line for line in held_body if line])
    return body


def _held_params(plan: Plan, nodes: dict) -> list[str]:
    """The parameters and buffers the held values are made from."""
    return list(dict.fromkeys(a for h in plan.held for a in nodes[h].inputs() if nodes[a].op == "param"))


def _held_call(plan: Plan, nodes: dict) -> str:
    outs = held_outputs(plan.graph, plan.held)
    args = ", ".join(["_dev"] + _held_params(plan, nodes))
    return f"        {', '.join(outs)}{',' if len(outs) == 1 else ''} = self._tw_held({args})"


def _held_method(plan: Plan, nodes: dict, lines: list[str]) -> list[str]:
    """`_tw_held`: the values forward builds from constants and parameters alone, made once per device
    and version of those parameters; made on every call where autograd would need their history."""
    params = _held_params(plan, nodes)
    ps = "(" + ", ".join(params) + ("," if len(params) == 1 else "") + ")"
    made = held_outputs(plan.graph, plan.held)
    outs = ", ".join(made) + ("," if len(made) == 1 else "")
    return ["", f"    def _tw_held(self, {', '.join(['_dev'] + params)}):",
            '        """Values forward builds from constants and parameters alone: made once per device and '
            'parameter version."""',
            "        try:",
            f"            key = (_dev, *[(id(t), t._version, t.data_ptr()) for t in {ps}])",
            "        except RuntimeError:  # NOTE: inference tensors keep no version: made on every call",
            "            key = None",
            f"        if torch.is_grad_enabled() and any(t.requires_grad for t in {ps}):",
            "            key = None  # NOTE: autograd needs their history: made on every call",
            "        held = self.__dict__.get('_tw_held_values')",
            "        if key is None or held is None or held[0] != key:",
            "            with torch.set_grad_enabled(key is None and torch.is_grad_enabled()):",
            *["        " + line for line in lines],
            f"            held = self.__dict__['_tw_held_values'] = (key, ({outs}), {ps})",
            "        return held[1]"]


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
