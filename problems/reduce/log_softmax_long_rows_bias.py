"""Log-softmax over 8 long rows (8 x 65536) after a per-column bias: rows split over blocks."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols) * 0.1)

    def forward(self, x):
        return F.log_softmax(x + self.bias, dim=-1)


rows = 8
cols = 65536


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [cols]
