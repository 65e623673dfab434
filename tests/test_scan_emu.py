"""Scan kernels (cumsum, cumprod) run on the CPU emulator against eager: every dim, the row layout
(short rows several a block, long rows in tiles) and the column layout, with zeros, NaN and inf."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, launching, mismatch, write_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

SOURCE = '''"""Emulator test model."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return ({exprs},)


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
'''


def _specials(x: torch.Tensor) -> torch.Tensor:
    """A zero, an inf, a NaN and a -inf early in the first rows along every dim (products stay in range
    elsewhere: past fp32's largest value eager on the CPU keeps a double running product, the GPU does not)."""
    x = x.clone()
    flat = x.view(-1)
    for i, v in zip((1, 7, 20, 33), (0.0, float("inf"), float("nan"), float("-inf"))):
        flat[i % flat.numel()] = v
    return x


@pytest.mark.parametrize("shape", [(16, 33), (12, 1000), (3, 9000), (4, 300, 5), (70, 6)])
def test_cumprod_every_dim(tmp_path, shape):
    exprs = {f"cumprod{d}": f"torch.cumprod(1.0 + 0.01 * x, dim={d})" for d in range(len(shape))}
    exprs["cumprod_epilogue"] = "torch.cumprod(x.abs() * 0.02 + 0.99, dim=-1).sqrt() * 2.0"
    exprs["cumsum"] = "torch.cumsum(x, dim=-1)"
    path = write_problem(tmp_path, f"scan{len(shape)}_{shape[-1]}",
                         SOURCE.format(exprs=", ".join(exprs.values()), shape=", ".join(map(str, shape))))
    new_cls, result = emulated_model(path, tmp_path)
    nodes = result.plan.graph.by_name()
    anchors = [nodes[k.anchor].op for k in result.plan.kernels if k.anchor]
    assert anchors.count("cumprod") == len(shape) + 1 and not [n for n in nodes.values() if n.op == "aten"]
    namespace: dict = {}
    exec(path.read_text(), namespace)
    torch.manual_seed(0)
    x = _specials(torch.randn(shape))
    with torch.no_grad():
        want, got = namespace["Model"]()(x.clone()), new_cls()(x.clone())
    launched = new_cls.forward.__globals__["_LIB"].launched
    assert set(launched) == launching(result.plan)  # NOTE: not the general path
    bad = [f"{name}: {m}" for name, g, w in zip(exprs, got, want) if (m := mismatch(g, w, 1e-4))]
    assert not bad, "\n".join(bad)
