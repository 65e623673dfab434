"""Spatial attention map: 3x3 Conv2d, the mean over its output channels (keepdim), then sigmoid."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x):
        return torch.sigmoid(self.conv(x).mean(dim=1, keepdim=True))


batch_size = 32
in_channels = 64
out_channels = 128
height = width = 64


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
