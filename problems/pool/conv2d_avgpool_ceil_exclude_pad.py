"""Inception-style branch: 1x1 Conv2d, SiLU, then a 3x3 stride-2 average pool with ceil_mode that does not count the padding."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 1)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)

    def forward(self, x):
        return self.pool(F.silu(self.conv(x)))


batch_size = 32
in_channels = 96
out_channels = 128
height = width = 35


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
