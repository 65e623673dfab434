"""The Python launch wrapper of each kernel: lay out its operands, allocate its outputs, launch it.

NOTE: a wrapper runs on every forward, so it stays short: each Python step costs about as much as a
small kernel's whole run.
"""
from __future__ import annotations

from math import prod

from torchweld.codegen import (contiguous_strides, is_contiguous, memory_order, operands, out_strides, reduce_launch,
                               variant_aligned, variant_name, vec_class, vector_width)
from torchweld.emit.conv_wrapper import conv_wrappers
from torchweld.emit.gemm_wrapper import gemm_wrappers
from torchweld.ir import Kernel, Node, Plan, Ref
from torchweld.tiling import ITEMSIZE


def wrapper(k: Kernel, plan: Plan) -> str:
    """`_<kernel>(operands...)`: the Python function that lays out operands, allocates outputs and
    launches kernel `k`, writing outputs where the plan says (`written_over`, `written_into`)."""
    into = {o: dst for o, (_, dst) in plan.written_into.items() if o in k.outputs}
    if k.kind == "gemm":
        return gemm_wrappers(k, plan)
    if k.kind == "conv":
        return conv_wrappers(k, plan)
    if k.kind in ("reduce", "depthwise"):
        return _reduce_wrapper(k, plan.graph, into)
    if k.kind == "pool":
        return _pool_wrapper(k, plan.graph, plan.layouts.of(k))
    return _pointwise_wrapper(k, plan, into)


def stride_spec(n: Node):
    """None for contiguous values, else the captured strides the kernel indexes with."""
    return None if is_contiguous(n) else tuple(n.stride)


def _prepare(names: list[str], nodes: dict, contiguous: tuple = (), batch: int = 0, lead: int = 1) -> list[str]:
    """Lay a kernel's operands out as it indexes them (`contiguous`: those it reads contiguous
    whatever their captured strides; `batch`: the kernel's outer size where it is a runtime size, over its
    `lead` outer dims: 2 where the sequence length is a runtime size too). Their device,
    dtype and shape need no check here: forward's guard checked the inputs and parameters, and values made
    inside forward follow."""
    lines = []
    for a in names:
        stride = None if a in contiguous else stride_spec(nodes[a])
        shape = tuple(nodes[a].shape)
        if stride is None:
            lines.append(f"    if not a_{a}.is_contiguous():")
            lines.append(f"        a_{a} = a_{a}.contiguous()")
        elif batch and lead > 1 and prod(shape[:2]) == batch:  # NOTE: dim 0's stride is the length's times dim 1's
            lines.append(f"    a_{a} = _tw_layout(a_{a}, (a_{a}.shape[0], a_{a}.shape[1], *{shape[2:]!r}), "
                         f"(a_{a}.shape[1] * {stride[1]}, *{stride[1:]!r}))")
        elif batch and shape[:1] == (batch,):  # NOTE: its dim 0 is the runtime batch's; its strides are not
            lines.append(f"    a_{a} = _tw_layout(a_{a}, (a_{a}.shape[0], *{shape[1:]!r}), {stride!r})")
        else:
            lines.append(f"    a_{a} = _tw_layout(a_{a}, {shape!r}, {stride!r})")
    return lines


def _allocate(out: str, shape: tuple, dtype, operand_nodes: list[Node]) -> str:
    """The output buffer: `empty_like` of an operand of the same shape and dtype is the cheapest call."""
    like = next((o for o in operand_nodes if tuple(o.shape) == tuple(shape) and o.dtype == dtype), None)
    if like is not None:
        return f"    out_{out} = torch.empty_like(a_{like.name}, memory_format=torch.contiguous_format)"
    return f"    out_{out} = torch.empty({tuple(shape)!r}, dtype=torch.{dtype}, device=dev)"


def _into_lines(into: dict[str, str], outs: list[str]) -> tuple[list[str], list[str]]:
    """(allocation lines, lines before the return) for outputs written into a parameter or buffer:
    into it where it is contiguous and 16-byte aligned (the kernels store vectors), else into a new
    buffer copied over after the launch."""
    alloc, after = [], []
    for o in outs:
        if o in into:
            p = f"a_{into[o]}"
            alloc.append(f"    out_{o} = {p} if {p}.is_contiguous() and {p}.data_ptr() % 16 == 0 else "
                         f"torch.empty_like({p}, memory_format=torch.contiguous_format)")
            after += [f"    if out_{o} is not {p}:", f"        {p}.copy_(out_{o})"]
    return alloc, after


def _launch(k: Kernel, ptrs: list[str], vec: str, first: str, cl_vec: str | None = None) -> list[str]:
    """The launch and its check; `cl_vec` given: the `_cl` build where `cl` (see `_pick_build`)."""
    stream = f"_tw_stream({first}.get_device())" if first else "_tw_stream(torch.cuda.current_device())"
    call = f"    err = _LIB.tw_launch_{k.name}({', '.join(ptrs)}, {vec}, {stream})"
    if cl_vec is not None:
        cl_call = f"        err = _LIB.tw_launch_{variant_name(k)}({', '.join(ptrs)}, {cl_vec}, {stream})"
        return ["    if cl:", cl_call, "    else:", "    " + call, "    if err:", f"        _tw_fail({k.name!r}, err)"]
    return [call, "    if err:", f"        _tw_fail({k.name!r}, err)"]


def _pick_build(cl_strides: dict[str, tuple], nodes: dict, batch: int = 0) -> list[str]:
    """Lines setting `cl`: every operand in `cl_strides` has the strides a channels-last convolution
    gives it, which the `_cl` build reads as they are; else they are laid out as captured."""
    test = " and ".join(f"a_{a}.stride() == {s!r}" for a, s in cl_strides.items())
    return [f"    cl = {test}",
            "    if not cl:  # NOTE: the convolution ran NCHW (no copy), or other strides: laid out as captured",
            *["    " + line for line in _prepare(list(cl_strides), nodes, batch=batch)]]


def _aligned_test(pairs) -> str:
    """`int(...)`: every (operand, bytes) pointer aligned; "1" where none needs testing."""
    checks = [f"a_{n}.data_ptr() % {b} == 0" for n, b in pairs]
    return f"int({' and '.join(checks)})" if checks else "1"


def _reduce_wrapper(k: Kernel, graph, into: dict[str, str]) -> str:
    """A reduce or depthwise kernel's wrapper: outputs take their own shapes; no vector build."""
    nodes = graph.by_name()
    params = ", ".join([f"a_{a}" for a in k.inputs] + [f"a_{d}" for d in into.values()])
    anchor = nodes[k.anchor]
    lines = [
        f"def _{k.name}({params}):",
        f'    """{k.name}: {anchor.op} with {len(k.nodes) - 1} fused pointwise ops; see its CUDA source above."""',
    ]
    in_place = [a for a in anchor.args[3:5] if isinstance(a, Ref)] if anchor.op in ("batch_norm", "instance_norm") else []
    if in_place:  # NOTE: the kernel updates the running statistics in place: a copy would lose the update
        lines.append(f"    assert {' and '.join(f'a_{a}.is_contiguous()' for a in in_place)}")
    flat = tuple(anchor.args[:2]) if k.kind == "depthwise" else ()  # the convolution's input and weight
    lines += _prepare([a for a in k.inputs if a not in in_place], nodes, flat, k.batch, k.lead)
    operand_nodes = [nodes[a] for a in k.inputs]
    into_alloc, after = _into_lines(into, list(k.outputs))
    allocs = [into_alloc.pop(0) if o in into else _allocate(o, nodes[o].shape, nodes[o].dtype, operand_nodes)
              for o in k.outputs]
    if any("device=dev" in a for a in allocs):
        lines.append(f"    dev = a_{k.inputs[0]}.device")
    carrier = _carrier(k, nodes)
    lines += _batched(allocs, k, nodes, carrier)
    ptrs = [f"a_{a}.data_ptr()" for a in k.inputs] + [f"out_{o}.data_ptr()" for o in k.outputs]
    ptrs += [_runtime(k, carrier)] * bool(k.batch)  # NOTE: a runtime batch's size follows the pointers
    if k.kind == "depthwise":
        lines += _launch(k, ptrs, "0", f"a_{k.inputs[0]}")
        lines.append(f"    return {', '.join(f'out_{o}' for o in k.outputs)},")
        return "\n".join(lines)
    launch = reduce_launch(k, graph)
    if launch.workspace:  # NOTE: per call, so that calls on two streams never share partial results
        size = f"{_runtime(k, carrier)} * {launch.workspace // k.batch}" if k.batch else f"{launch.workspace}"
        lines.append(f"    ws = torch.empty({size}, dtype=torch.float32, device=a_{k.inputs[0]}.device)")
        ptrs.append("ws.data_ptr()")
    vec = "0"
    if launch.vec > 1:
        # NOTE: outputs come from the caching allocator (512-byte aligned blocks): only operands are tested
        checks = [f"a_{n}.data_ptr() % {b} == 0" for n, b in launch.aligned if n not in k.outputs]
        vec = f"int({' and '.join(checks)})" if checks else "1"
    lines += _launch(k, ptrs, vec, f"a_{k.inputs[0]}") + after
    outs = ", ".join(f"out_{o}" for o in k.outputs)
    lines.append(f"    return {outs}{',' if len(k.outputs) == 1 else ''}")
    return "\n".join(lines)


def _pool_wrapper(k: Kernel, graph, cl_strides: dict[str, tuple]) -> str:
    """A pool kernel's wrapper: each output in the layout the kernel writes."""
    nodes = graph.by_name()
    anchor = nodes[k.anchor]
    order = memory_order(nodes[anchor.args[0]].shape, nodes[anchor.args[0]].stride)
    lines = [
        f"def _{k.name}({', '.join(f'a_{a}' for a in k.inputs)}):",
        f'    """{k.name}: {anchor.op} with {len(k.nodes) - 1} fused pointwise ops; see its CUDA source above."""',
        *(_pick_build(cl_strides, nodes, k.batch) if cl_strides else []),
        *_prepare([a for a in k.inputs if a not in cl_strides], nodes, batch=k.batch, lead=k.lead),
    ]
    allocs = []
    for o in k.outputs:
        shape, stride = tuple(nodes[o].shape), out_strides(nodes[o], order)
        allocs.append(_allocate(o, shape, nodes[o].dtype, [nodes[a] for a in k.inputs])
                      if stride == contiguous_strides(shape) else
                      f"    out_{o} = torch.empty_strided({shape!r}, {stride!r}, dtype=torch.{nodes[o].dtype}, device=dev)")
    if any("device=dev" in a for a in allocs):
        lines.append(f"    dev = a_{k.inputs[0]}.device")
    carrier = _carrier(k, nodes)
    lines += _batched(allocs, k, nodes, carrier)
    ptrs = [f"a_{a}.data_ptr()" for a in k.inputs] + [f"out_{o}.data_ptr()" for o in k.outputs]
    ptrs += [_runtime(k, carrier)] * bool(k.batch)
    lines += _launch(k, ptrs, "0", f"a_{k.inputs[0]}", "0" if cl_strides else None)
    lines.append(f"    return {', '.join(f'out_{o}' for o in k.outputs)},")
    return "\n".join(lines)


def _pointwise_wrapper(k: Kernel, plan: Plan, into: dict[str, str]) -> str:
    """A pointwise kernel's wrapper: a vector build where its operands' pointers are aligned, and a
    `_cl` build where its operands may come channels-last (`plan.layouts`)."""
    graph = plan.graph
    nodes = graph.by_name()
    cl_strides = plan.layouts.of(k)
    ops = operands(k, graph)
    vec = vector_width(k, graph)
    params = ", ".join([f"a_{o.name}" for o in ops] + [f"a_{d}" for d in into.values()])
    aligned = [f"a_{o.name}" for o in ops if vec > 1 and vec_class(o, vec) in ("full", "contig")]
    align = {f"a_{o.name}": ITEMSIZE[o.dtype] * vec for o in ops}
    outs = [(o, nodes[o].dtype) for o in k.outputs]
    lines = [
        f"def _{k.name}({params}):",
        f'    """{k.name}: {len(k.nodes)} fused ops over {_over(k)}; see its CUDA source above."""',
        *(_pick_build(cl_strides, nodes, k.batch) if cl_strides else []),
        *_prepare([o.name for o in ops if o.name not in cl_strides], nodes, batch=k.batch, lead=k.lead),
    ]
    over = plan.written_over
    into_alloc, after = _into_lines(into, [o for o, _ in outs])
    allocs = [into_alloc.pop(0) if o in into else
              f"    out_{o} = a_{over[o]}  # NOTE: {over[o]} is read here alone, each element before it is written"
              if o in over else _allocate(o, k.shape, dt, [nodes[p.name] for p in ops]) for o, dt in outs]
    if k.batch:  # NOTE: the batch is a runtime size: outputs not made like an operand take it from one
        # NOTE: of the kernel's rank: a lower-rank operand whose dim 0 happens to be as long is no carrier
        carrier = next(p.name for p in ops if len(nodes[p.name].shape) == len(k.shape)
                       and prod(nodes[p.name].shape[:k.lead]) == k.batch)
        allocs = [a.replace(f"torch.empty({tuple(k.shape)!r}", f"torch.empty({_runtime_shape(k, carrier, k.shape)}")
                  for a in allocs]
    if any("device=dev" in a for a in allocs):
        lines.append(f"    dev = a_{ops[0].name}.device" if ops else "    dev = torch.device('cuda')")
    lines += allocs
    # NOTE: outputs come from the caching allocator, whose blocks are 512-byte aligned: only operands are tested.
    checks = [f"{a}.data_ptr() % {align[a]} == 0" for a in aligned]
    vec_arg = "0" if vec == 1 else f"int({' and '.join(checks)})" if checks else "1"
    ptrs = [f"a_{o.name}.data_ptr()" for o in ops] + [f"out_{o}.data_ptr()" for o, _ in outs]
    ptrs += [f"out_{outs[0][0]}.numel()"] * bool(k.batch)
    cl_vec = None
    if cl_strides:
        cl_aligned = variant_aligned(k, graph, cl_strides)
        cl_vec = "0" if cl_aligned is None else _aligned_test(cl_aligned)
    lines += _launch(k, ptrs, vec_arg, f"a_{ops[0].name}" if ops else "", cl_vec) + after
    ret = ", ".join(f"out_{o}" for o, _ in outs)
    lines.append(f"    return {ret}{',' if len(outs) == 1 else ''}")
    return "\n".join(lines)


def _carrier(k: Kernel, nodes: dict) -> str | None:
    """The operand a runtime batch is read from (the outer dims of every batched operand: plan/batch.py)."""
    if not k.batch:
        return None
    return next((a for a in k.inputs if len(nodes[a].shape) >= k.lead and prod(nodes[a].shape[:k.lead]) == k.batch), None)


def _runtime(k: Kernel, carrier: str) -> str:
    """The runtime size of the kernel's outer dims, read from its carrier: the batch's, or the tokens'."""
    return " * ".join(f"a_{carrier}.shape[{i}]" for i in range(k.lead))


def _runtime_shape(k: Kernel, carrier: str, shape: tuple) -> str:
    """`shape` as a Python tuple whose outer dims are the carrier's at run time."""
    return f"({', '.join(f'a_{carrier}.shape[{i}]' for i in range(k.lead))}, *{tuple(shape[k.lead:])!r})"


def _batched(allocs: list[str], k: Kernel, nodes: dict, carrier: str | None) -> list[str]:
    """Allocation lines, each output whose outer dims are a runtime batch (tokens) made at the carrier's."""
    if not k.batch:
        return allocs
    out = []
    for o, line in zip(k.outputs, allocs):
        shape = tuple(nodes[o].shape)
        if len(shape) >= k.lead and prod(shape[:k.lead]) == k.batch:
            line = line.replace(f"torch.empty({shape!r}", f"torch.empty({_runtime_shape(k, carrier, shape)}")
            line = line.replace(f"torch.empty_strided({shape!r}", f"torch.empty_strided({_runtime_shape(k, carrier, shape)}")
        out.append(line)
    return out


def _over(k: Kernel) -> str:
    """The iteration shape, its batch (and sequence) said where that is a runtime size."""
    if not k.batch:
        return f"{tuple(k.shape)}"
    if k.lead > 1:
        return f"({', '.join(['batch', 'sequence', *map(str, k.shape[2:])])})"
    return f"(batch, {', '.join(map(str, k.shape[1:]))})"
