"""A batched matmul written as torch.einsum("bij,bjk->bik"), then ReLU and a scalar scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return torch.relu(torch.einsum("bij,bjk->bik", a, b)) * self.scale


batch_size = 64
rows = 512
inner = 128
cols = 512
scale = 0.25


def get_inputs():
    return [torch.randn(batch_size, rows, inner), torch.randn(batch_size, inner, cols)]


def get_init_inputs():
    return [scale]
