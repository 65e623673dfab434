"""Classifier tail: 3x3 Conv2d with bias, global average pool (adaptive_avg_pool2d to 1), flatten, plus a learned bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.conv(x), 1).flatten(1)
        return x + self.bias


batch_size = 32
in_channels = 64
out_channels = 128
height = width = 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
