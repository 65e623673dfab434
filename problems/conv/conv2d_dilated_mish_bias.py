"""Dilated 3x3 Conv2d that keeps the spatial size, then Mish and a per-channel bias add."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size,
            padding=dilation * (kernel_size - 1) // 2, dilation=dilation,
        )
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = F.mish(x)
        return x + self.bias


batch_size = 16
in_channels = 64
out_channels = 64
height = width = 96
kernel_size = 3
dilation = 2
bias_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, dilation, bias_shape]
