"""Upsampling ConvTranspose3d, then its output plus a scaled GELU of itself."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, residual_scale):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size,
            stride=stride, padding=padding, output_padding=output_padding,
        )
        self.residual_scale = residual_scale

    def forward(self, x):
        y = self.conv_transpose(x)
        return y + F.gelu(y) * self.residual_scale


batch_size = 8
in_channels = 32
out_channels = 16
depth, height, width = 8, 32, 32
kernel_size = 3
stride = 2
padding = 1
output_padding = 1
residual_scale = 0.3


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, residual_scale]
