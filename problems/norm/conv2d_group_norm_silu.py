"""Conv2d, then GroupNorm with 32 groups and SiLU (a diffusion U-Net block)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


batch_size = 16
in_channels = 64
out_channels = 128
height = width = 64
groups = 32


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
