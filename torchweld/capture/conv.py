"""Capture of depthwise convolutions: `aten.convolution` with groups == input channels -> the IR's
`depthwise_conv` anchor (ir.CONV), which its own kernel runs with the pointwise ops that follow.

Only what that kernel computes exactly becomes an anchor: 1d or 2d, not transposed, float data of
one dtype, one input channel per group (up to MAX_MULTIPLIER outputs each). Anything else stays a
library call.
"""
from __future__ import annotations

from math import prod

import torch

from torchweld.capture.meta import dtype_name, val
from torchweld.ir import CONVOLUTION, KERNEL_DTYPES, Node, Ref
from torchweld.tiling import MAX_MULTIPLIER, geometry, tiling


def depthwise_nodes(n, name: str, names: dict, origin: str) -> list[Node] | None:
    """The anchor for fx node `n` if it is a depthwise convolution the kernel handles, else None."""
    if str(n.target) != CONVOLUTION or len(n.args) != 9 or n.kwargs:
        return None
    x, w, b, stride, padding, dilation, transposed, _, groups = n.args
    xv, wv, bv, out = val(x), val(w), val(b), val(n)
    tensors = [t for t in (xv, wv, out) + ((bv,) if b is not None else ())]
    if not all(isinstance(t, torch.Tensor) for t in tensors) or transposed or xv.dim() not in (3, 4):
        return None
    dtype = dtype_name(out.dtype)
    if dtype not in KERNEL_DTYPES or any(t.dtype != out.dtype for t in tensors) or out.numel() == 0:
        return None
    c, co = int(xv.shape[1]), int(wv.shape[0])
    if groups != c or wv.shape[1] != 1 or co % c != 0 or (bv is not None and tuple(bv.shape) != (co,)):
        return None
    shape = tuple(int(s) for s in out.shape)
    attrs = (("dilation", tuple(dilation)), ("groups", c), ("padding", tuple(padding)), ("stride", tuple(stride)))
    strides = tuple(prod(shape[d + 1:]) for d in range(len(shape)))
    ref = Ref(names[b]) if b is not None else None
    node = Node(name, "depthwise_conv", (Ref(names[x]), Ref(names[w]), ref), shape, dtype, attrs=attrs,
                origin=origin, stride=strides)  # NOTE: the kernel writes its output contiguous
    # Where the kernel would not do well (many outputs per channel: a one-channel image's first
    # layer) or has no tiling, the convolution stays in cuDNN, its bias then folded into what follows.
    operands = {node.args[0]: Node("x", "input", shape=tuple(xv.shape)),
                node.args[1]: Node("w", "param", shape=tuple(wv.shape))}
    if co // c > MAX_MULTIPLIER or tiling(geometry(node, operands)) is None:
        return None
    return [node]
