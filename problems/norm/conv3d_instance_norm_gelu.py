"""Conv3d, InstanceNorm3d without affine parameters, then GELU (a 3-D style-transfer block)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.InstanceNorm3d(out_channels)

    def forward(self, x):
        return F.gelu(self.norm(self.conv(x)))


batch_size = 4
in_channels = 16
out_channels = 32
depth = 16
height = width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
