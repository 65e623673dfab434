"""Conv3d, then GroupNorm with 8 groups and GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return F.gelu(self.norm(self.conv(x)))


batch_size = 8
in_channels = 16
out_channels = 32
depth = 16
height = width = 32
groups = 8


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
