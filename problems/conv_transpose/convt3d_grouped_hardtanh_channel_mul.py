"""Grouped ConvTranspose3d (kernel 4, stride 2), then hardtanh with given bounds and a per-channel multiplier."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups, min_val, max_val, multiplier_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, groups=groups,
        )
        self.min_val = min_val
        self.max_val = max_val
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))

    def forward(self, x):
        x = self.conv_transpose(x)
        x = F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)
        return x * self.multiplier


batch_size = 4
in_channels = 24
out_channels = 24
depth, height, width = 12, 24, 24
kernel_size = 4
stride = 2
padding = 1
groups = 3
min_val = -0.5
max_val = 0.5
multiplier_shape = (out_channels, 1, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, groups, min_val, max_val, multiplier_shape]
