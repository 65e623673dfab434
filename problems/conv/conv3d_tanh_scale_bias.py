"""Same-padded Conv3d, then tanh, a scalar scale, and a per-channel bias of shape (C, 1, 1, 1)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale, bias_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.tanh(x) * self.scale
        return x + self.bias


batch_size = 8
in_channels = 16
out_channels = 32
depth, height, width = 16, 64, 64
kernel_size = 3
scale = 0.5
bias_shape = (out_channels, 1, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale, bias_shape]
