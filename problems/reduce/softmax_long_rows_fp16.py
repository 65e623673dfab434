"""fp16: softmax over two very long rows (2 x 131072) with a scale, each row split over many blocks."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.softmax(x * self.scale, dim=-1)


rows = 2
cols = 131072
scale = 0.125


def get_inputs():
    return [torch.randn(rows, cols, dtype=torch.float16)]


def get_init_inputs():
    return [scale]
