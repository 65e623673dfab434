"""Conv2d, then the mean over H and W (global average pool, keepdim) plus a per-channel bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))

    def forward(self, x):
        x = self.conv(x)
        return torch.mean(x, dim=[2, 3], keepdim=True) + self.bias


batch_size = 64
in_channels = 64
out_channels = 128
height = width = 58
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
