"""Same-padded Conv2d, then exact GELU and a learned per-channel scale."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = nn.Parameter(torch.randn(scale_shape))

    def forward(self, x):
        x = self.conv(x)
        x = F.gelu(x)
        return x * self.scale


batch_size = 32
in_channels = 32
out_channels = 64
height = width = 128
kernel_size = 3
scale_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale_shape]
