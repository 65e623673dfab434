"""A lone ConvTranspose3d with a cubic kernel (stride 1, no padding, no bias)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=False):
        super(Model, self).__init__()
        self.conv_transpose3d = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size=(kernel_size, kernel_size, kernel_size),
            stride=stride, padding=padding, output_padding=output_padding,
            groups=groups, bias=bias,
        )

    def forward(self, x):
        return self.conv_transpose3d(x)


batch_size = 8
in_channels = 48
out_channels = 48
depth = height = width = 64
kernel_size = 3
stride = 1
padding = 0
output_padding = 0
groups = 1
bias = False


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias]
