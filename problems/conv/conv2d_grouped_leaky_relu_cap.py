"""Grouped Conv2d, then leaky ReLU with a given slope and an upper cap (min with a constant)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups, negative_slope, cap):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1, groups=groups)
        self.negative_slope = negative_slope
        self.cap = cap

    def forward(self, x):
        x = self.conv(x)
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        return torch.clamp(x, max=self.cap)


batch_size = 16
in_channels = 128
out_channels = 256
height = width = 28
kernel_size = 3
groups = 8
negative_slope = 0.1
cap = 2.5


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups, negative_slope, cap]
