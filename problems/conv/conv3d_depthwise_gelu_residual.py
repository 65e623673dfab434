"""Depthwise 3x3x3 Conv3d (one filter per channel), then exact GELU and a residual add of the input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv3d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x):
        return x + F.gelu(self.conv(x))


batch_size = 16
channels = 64
frames = 8
height = width = 32


def get_inputs():
    return [torch.randn(batch_size, channels, frames, height, width)]


def get_init_inputs():
    return [channels]
