"""Grouped (4 groups) and dilated (2) 3x3 Conv2d keeping the spatial size, then tanh and a learned per-channel scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, groups, dilation):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation, groups=groups)
        self.scale = nn.Parameter(torch.rand(channels, 1, 1) + 0.5)

    def forward(self, x):
        return torch.tanh(self.conv(x)) * self.scale


batch_size = 16
channels = 128
height = width = 64
groups = 4
dilation = 2


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, groups, dilation]
