"""bf16 broadcast: (M, N) plus an (N,) bias, exact GELU, then times a per-row (M, 1) scale input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(num_features, dtype=torch.bfloat16))

    def forward(self, x, row_scale):
        return F.gelu(x + self.bias) * row_scale


num_rows = 1000
num_features = 1536


def get_inputs():
    return [
        torch.randn(num_rows, num_features, dtype=torch.bfloat16),
        torch.rand(num_rows, 1, dtype=torch.bfloat16),
    ]


def get_init_inputs():
    return [num_features]
