"""torch.baddbmm adding a learned (1, M, N) bias to a batched matmul, then sigmoid."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, rows, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1, rows, cols) * 0.1)

    def forward(self, a, b):
        return torch.sigmoid(torch.baddbmm(self.bias, a, b))


batch_size = 64
rows = 256
inner = 256
cols = 512


def get_inputs():
    return [torch.randn(batch_size, rows, inner), torch.randn(batch_size, inner, cols) * inner ** -0.5]


def get_init_inputs():
    return [rows, cols]
