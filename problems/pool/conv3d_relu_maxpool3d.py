"""C3D-style video block: Conv3d, ReLU, then a 2x2x2 max pool over time and space."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1)
        self.pool = nn.MaxPool3d(2, stride=2)

    def forward(self, x):
        return self.pool(F.relu(self.conv(x)))


batch_size = 4
in_channels = 32
out_channels = 64
frames = 16
height = width = 56


def get_inputs():
    return [torch.rand(batch_size, in_channels, frames, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
