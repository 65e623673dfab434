"""Capture of torch.cat and torch.stack: an aten.cat call -> one IR `cat` anchor (ir.CONCAT) over its parts,
where they are float tensors of the result's dtype (a stack: over each part reshaped with a 1 at its dim);
anything else stays an aten call."""
from __future__ import annotations

import torch

from torchweld.capture.meta import dtype_name, val
from torchweld.ir import KERNEL_DTYPES, Node, Ref


def concat_nodes(n: torch.fx.Node, name: str, names: dict, origin: str) -> list[Node] | None:
    """[cat(parts..., dim=d)] for `aten.cat(parts, d)`, [reshapes..., cat] for `aten.stack(parts, d)`, else None."""
    stack = str(n.target) == "aten.stack.default"
    if str(n.target) != "aten.cat.default" and not stack or n.kwargs or not n.args or not isinstance(n.args[0], (list, tuple)):
        return None
    out = val(n)
    parts = list(n.args[0])
    if not isinstance(out, torch.Tensor) or out.dim() == 0 or not all(isinstance(p, torch.fx.Node) for p in parts):
        return None
    values = [val(p) for p in parts]
    dtype = dtype_name(out.dtype)
    if dtype not in KERNEL_DTYPES or not all(isinstance(v, torch.Tensor) and v.dim() + stack == out.dim()
                                             and dtype_name(v.dtype) == dtype for v in values):
        return None  # NOTE: mixed dtypes promote, and a legacy empty (0,) part is skipped by cat: PyTorch's
    dim = (n.args[1] if len(n.args) > 1 else 0) % out.dim()
    shape = tuple(int(s) for s in out.shape)
    stride = tuple(int(s) for s in out.stride())
    refs, made = [Ref(names[p]) for p in parts], []
    if stack:  # NOTE: reshape, not view: a part may be a non-contiguous view
        for i, v in enumerate(values):
            part = tuple(int(s) for s in v.shape)
            made.append(Node(f"{name}_s{i}", "aten", (refs[i], list(part[:dim] + (1,) + part[dim:])),
                             part[:dim] + (1,) + part[dim:], dtype, target="aten.reshape.default", origin=origin))
            refs[i] = Ref(made[-1].name)
    return made + [Node(name, "cat", tuple(refs), shape, dtype, attrs=(("dim", dim),), origin=origin,
                        stride=stride)]
