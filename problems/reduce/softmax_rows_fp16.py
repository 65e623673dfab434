"""fp16: softmax over rows of 2048, then a per-column fp16 weight."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(cols, dtype=torch.float16))

    def forward(self, x):
        return torch.softmax(x, dim=-1) * self.weight


rows = 4096
cols = 2048


def get_inputs():
    return [torch.randn(rows, cols, dtype=torch.float16)]


def get_init_inputs():
    return [cols]
