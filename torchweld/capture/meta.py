"""What the trace records about an fx node: its fake value, and names for its dtype and arguments."""
from __future__ import annotations

import torch

from torchweld.ir import Ref


def val(a):
    """The fake tensor (or tuple, or number) fx node `a` computes; None for a constant argument."""
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else None


def dtype_name(dt: torch.dtype) -> str:
    """`torch.float32` -> "float32", as the IR writes dtypes."""
    return str(dt).removeprefix("torch.")


def to_ir_arg(a, names: dict):
    """An fx argument in the IR: fx nodes become Refs to their IR names (inside lists too)."""
    if isinstance(a, torch.fx.Node):
        return Ref(names[a])
    if isinstance(a, (list, tuple)):
        return type(a)(to_ir_arg(x, names) for x in a)
    return a
