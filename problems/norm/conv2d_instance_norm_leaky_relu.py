"""Conv2d, then InstanceNorm2d with affine parameters and leaky ReLU (style-transfer block)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.InstanceNorm2d(out_channels, affine=True)

    def forward(self, x):
        return F.leaky_relu(self.norm(self.conv(x)), 0.2)


batch_size = 16
in_channels = 32
out_channels = 64
height = width = 64


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
