"""fp16 broadcast: per-channel (C, 1, 1) scale and shift on an NCHW tensor, then tanh."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_channels):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(num_channels, 1, 1, dtype=torch.float16))
        self.shift = nn.Parameter(torch.randn(num_channels, 1, 1, dtype=torch.float16))

    def forward(self, x):
        return torch.tanh(x * self.scale + self.shift)


batch_size = 32
num_channels = 128
height = width = 64


def get_inputs():
    return [torch.randn(batch_size, num_channels, height, width, dtype=torch.float16)]


def get_init_inputs():
    return [num_channels]
