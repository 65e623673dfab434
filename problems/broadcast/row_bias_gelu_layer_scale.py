"""Row-vector bias (N,) added to an (M, N) matrix, exact GELU, then a per-feature layer-scale (N,)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, num_features, init_scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(num_features))
        self.gamma = nn.Parameter(torch.randn(num_features) * init_scale)

    def forward(self, x):
        return F.gelu(x + self.bias) * self.gamma


num_rows = 1024
num_features = 1024
init_scale = 0.1


def get_inputs():
    return [torch.randn(num_rows, num_features)]


def get_init_inputs():
    return [num_features, init_scale]
