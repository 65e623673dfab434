"""fp16 elementwise on an odd 997 x 1001 shape: swish of x where x > y, otherwise half of y."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.where(x > y, x * torch.sigmoid(x), y * 0.5)


rows = 997
cols = 1001


def get_inputs():
    return [
        torch.randn(rows, cols, dtype=torch.float16),
        torch.randn(rows, cols, dtype=torch.float16),
    ]


def get_init_inputs():
    return []
