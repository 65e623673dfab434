"""Pointwise (1x1) Conv2d projecting 256 to 512 channels, then adaptive_avg_pool2d to 1x1 and flatten."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.proj(x), 1).flatten(1)


batch_size = 64
in_channels = 256
out_channels = 512
height = width = 28


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
