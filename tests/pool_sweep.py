"""A sweep of pooling settings as one problem source (every pool a separate output, each with a
prologue and epilogue of its own): built on a GPU by tests/gpu/test_pool_gpu.py, compiled by nvcc in
tests/test_pool.py."""
from __future__ import annotations

# The sweep: {x} is a 2-d pool's input (N, C, H, W), {s} a 1-d pool's (N, C, L), {z} a 3-d pool's,
# {g} a small (N, C, H, W) map for global pools.
SWEEP = [
    "F.max_pool2d({x}, 3, 2, 1, ceil_mode=True)",
    "F.max_pool2d({x}, 2)",
    "F.max_pool2d({x}, (2, 3), (1, 2), (1, 0), (2, 1), ceil_mode=True)",
    "F.max_pool2d({x}, 3, 1, 1, 2)",
    "F.avg_pool2d({x}, 3, 2, 1, ceil_mode=True, count_include_pad=False)",
    "F.avg_pool2d({x}, 3, 2, 1, ceil_mode=True, count_include_pad=True)",
    "F.avg_pool2d({x}, (4, 2), (3, 2), (2, 1), ceil_mode=True)",
    "F.avg_pool2d({x}, 2, divisor_override=3)",
    "F.avg_pool2d({x}, 3, 2, 1, divisor_override=5)",
    "F.adaptive_avg_pool2d({x}, (5, 7))",
    "F.adaptive_avg_pool2d({x}, (1, 4))",
    "F.adaptive_max_pool2d({x}, (4, 6))",
    "F.adaptive_max_pool2d({g}, 1)",  # global: a reduction over contiguous data, a pool over channels-last
    "{g}.mean((2, 3), keepdim=True)",
    "F.adaptive_avg_pool2d({x}, 1)",  # few outputs, long windows: a reduction over either layout
    "F.adaptive_avg_pool2d({x}, (25, 21))",
    "(F.max_pool2d({x}, 3, 1, 1) - x)",  # same-size pool: the epilogue reads the input at the output's place
    "F.max_pool1d({s}, 5, 3, 2, 2, ceil_mode=True)",
    "F.avg_pool1d({s}, 4, 3, 2, ceil_mode=True, count_include_pad=False)",
    "F.adaptive_avg_pool1d({s}, 7)",
    "F.adaptive_max_pool1d({s}, 9)",
    "F.max_pool3d({z}, 2)",
    "F.max_pool3d({z}, (2, 3, 2), (1, 2, 2), (1, 1, 0), (2, 1, 1), ceil_mode=True)",
    "F.avg_pool3d({z}, 3, 2, 1, ceil_mode=True, count_include_pad=False)",
    "F.avg_pool3d({z}, (2, 3, 3), 2, (0, 1, 1), divisor_override=1)",
    "F.adaptive_avg_pool3d({z}, (2, 3, 4))",
    "F.adaptive_max_pool3d({z}, (3, 2, 5))",
    "F.avg_pool2d({x}.transpose(2, 3), 3, 2, 1, ceil_mode=True)",  # read along H, written in eager's layout
]
PROLOGUES = ["{v}", "torch.relu({v} + {c})", "{v} * (self.w{d} + {c})"]
EPILOGUES = ["{p}", "F.hardswish({p})", "torch.sigmoid({p} - self.w{d}) * {c}"]

SOURCE = '''"""Every pool of the sweep at once."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(8, 1, dtype=torch.{dtype}))
        self.w2 = nn.Parameter(torch.randn(8, 1, 1, dtype=torch.{dtype}))
        self.w3 = nn.Parameter(torch.randn(8, 1, 1, 1, dtype=torch.{dtype}))

    def forward(self, x, s, z, g):
        return ({exprs},)


def get_inputs():
    return [torch.randn(2, 8, 17, 19, dtype=torch.{dtype}){cl4}, torch.randn(3, 8, 61, dtype=torch.{dtype}),
            torch.randn(2, 8, 7, 10, 11, dtype=torch.{dtype}){cl5}, torch.randn(4, 8, 7, 9, dtype=torch.{dtype}){cl4}]


def get_init_inputs():
    return []
'''


def sweep_exprs() -> list[str]:
    """Each pool of SWEEP with prologue i % 3 and epilogue (i // 3) % 3."""
    exprs = []
    for i, pool in enumerate(SWEEP):
        var, d = next((v, d) for v, d in (("x", 2), ("g", 2), ("s", 1), ("z", 3)) if "{" + v + "}" in pool)
        c = round(0.05 * (i + 1), 2)  # a constant of its own: no two prologues are the same value
        pro = PROLOGUES[i % 3].format(v=var, c=c, d=d)
        exprs.append(EPILOGUES[(i // 3) % 3].format(p=pool.format(**{var: pro}), c=c + 1, d=d))
    return exprs


def sweep_source(dtype: str, channels_last: bool) -> str:
    return SOURCE.format(dtype=dtype, exprs=",\n                ".join(sweep_exprs()),
                         cl4=".contiguous(memory_format=torch.channels_last)" if channels_last else "",
                         cl5=".contiguous(memory_format=torch.channels_last_3d)" if channels_last else "")
