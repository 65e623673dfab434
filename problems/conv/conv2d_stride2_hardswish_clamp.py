"""Stride-2 Conv2d (downsampling), then hardswish and a clamp to configurable bounds."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, clamp_min, clamp_max):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.conv(x)
        x = F.hardswish(x)
        return torch.clamp(x, min=self.clamp_min, max=self.clamp_max)


batch_size = 64
in_channels = 32
out_channels = 64
height = width = 112
kernel_size = 3
stride = 2
clamp_min = -0.25
clamp_max = 4.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, clamp_min, clamp_max]
