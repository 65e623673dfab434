"""Stride-1 ConvTranspose2d, then leaky ReLU and an elementwise minimum against a learned per-channel ceiling."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding, negative_slope, cap_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, padding=padding)
        self.negative_slope = negative_slope
        self.cap = nn.Parameter(torch.randn(cap_shape))

    def forward(self, x):
        x = self.conv_transpose(x)
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        return torch.minimum(x, self.cap)


batch_size = 16
in_channels = 256
out_channels = 128
height = width = 32
kernel_size = 3
padding = 1
negative_slope = 0.02
cap_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, negative_slope, cap_shape]
