"""Folded batch-norm at inference: per-channel (C, 1, 1) scale and shift on an NCHW tensor, then ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_channels):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(num_channels, 1, 1))
        self.shift = nn.Parameter(torch.randn(num_channels, 1, 1))

    def forward(self, x):
        return torch.relu(x * self.scale + self.shift)


batch_size = 32
num_channels = 128
height = width = 64


def get_inputs():
    return [torch.rand(batch_size, num_channels, height, width)]


def get_init_inputs():
    return [num_channels]
