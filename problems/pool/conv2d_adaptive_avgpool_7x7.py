"""Classifier neck: Conv2d and ReLU on a 20x20 map, then an adaptive average pool to 7x7 (windows of 3 and 4 rows)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((7, 7))

    def forward(self, x):
        return torch.flatten(self.pool(F.relu(self.conv(x))), 1)


batch_size = 32
in_channels = 256
out_channels = 512
height = width = 20


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
