"""Conv2d 3x3, hardtanh to [-2, 2], then a learned per-channel gain of shape (C, 1, 1)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.gain = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)

    def forward(self, x):
        return F.hardtanh(self.conv(x), -2.0, 2.0) * self.gain


batch_size = 32
in_channels = 64
out_channels = 128
size = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels]
