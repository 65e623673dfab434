"""GELU tanh approximation spelled out with pow and tanh, as in older transformer code."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = (2.0 / torch.pi) ** 0.5

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(self.k * (x + 0.044715 * torch.pow(x, 3))))


batch_size = 8
seq_len = 2048
hidden = 3072


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
