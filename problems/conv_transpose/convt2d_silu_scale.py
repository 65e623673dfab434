"""ConvTranspose2d that doubles the resolution (kernel 4, stride 2, padding 1), then SiLU and a scalar scale."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, scale):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.scale = scale

    def forward(self, x):
        x = self.up(x)
        return F.silu(x) * self.scale


batch_size = 32
in_channels = 128
out_channels = 64
height = width = 32
kernel_size = 4
stride = 2
padding = 1
scale = 1.5


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, scale]
