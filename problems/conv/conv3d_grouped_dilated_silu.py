"""Grouped (4 groups) dilated Conv3d (kernel 3, dilation 2, same size), then SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = nn.Conv3d(channels, channels, 3, padding=2, dilation=2, groups=groups)

    def forward(self, x):
        return F.silu(self.conv(x))


batch_size = 4
channels = 64
groups = 4
depth, height, width = 16, 40, 40


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [channels, groups]
