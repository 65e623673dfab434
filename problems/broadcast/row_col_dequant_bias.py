"""Dequantize-style rescale: (M, N) values times a per-row (M, 1) input scale and a per-column (N,) scale, plus a bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, out_features):
        super().__init__()
        self.col_scale = nn.Parameter(torch.randn(out_features))
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, acc, row_scale):
        return acc * row_scale * self.col_scale + self.bias


num_rows = 4096
out_features = 4096


def get_inputs():
    acc = torch.randn(num_rows, out_features) * 100.0
    row_scale = torch.rand(num_rows, 1) * 0.01
    return [acc, row_scale]


def get_init_inputs():
    return [out_features]
