"""Tensors made inside `forward` from Python data (`torch.tensor(0.5)`, `torch.tensor([...])`): the
trace holds them as graph attributes; the IR holds them as the calls that make them again."""
from __future__ import annotations

import torch

from torchweld.capture.meta import dtype_name
from torchweld.ir import Node

# NOTE: a constant is printed into the emitted file as a literal; beyond this many elements it
# would swamp the file, and the model keeps its original forward instead
MAX_LITERAL = 4096


class ConstantError(Exception):
    """A constant made inside forward that the IR cannot hold."""


def constant_node(name: str, value: torch.Tensor, origin: str = "") -> Node:
    """`aten.full` where every element is one number (a scalar folds into the ops that read it),
    else `torch.tensor(literal)`; both made on the device forward runs on, in the constant's dtype."""
    if not isinstance(value, torch.Tensor) or value.is_complex() or value.is_quantized:
        raise ConstantError(f"a constant of type {type(value).__name__} made inside forward")
    shape, dtype = tuple(int(s) for s in value.shape), dtype_name(value.dtype)
    attrs = (("device", torch.device("cpu")), ("dtype", value.dtype), ("pin_memory", False))
    flat = value.detach().cpu().reshape(-1)
    same = (flat == flat[0]) | ((flat != flat) & (flat[0] != flat[0])) if flat.numel() else flat
    if flat.numel() > 0 and bool(same.all()):
        return Node(name, "aten", (list(shape), _number(flat[0].item())), shape, dtype,
                    target="aten.full.default", attrs=attrs, origin=origin, stride=_stride(shape))
    if flat.numel() > MAX_LITERAL:
        raise ConstantError(f"a constant of {flat.numel()} elements made inside forward from Python data "
                            f"(up to {MAX_LITERAL} are written into the file)")
    literal = value.detach().cpu().tolist()
    return Node(name, "aten", (_nested(literal),), shape, dtype, target="torch.tensor", attrs=attrs,
                origin=origin, stride=_stride(shape))


def _number(x):
    return bool(x) if isinstance(x, bool) else x


def _nested(x):
    """Lists as tuples, so the node stays hashable and comparable."""
    return tuple(_nested(v) for v in x) if isinstance(x, list) else x


def _stride(shape: tuple) -> tuple:
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= max(s, 1)
    return tuple(reversed(out))
