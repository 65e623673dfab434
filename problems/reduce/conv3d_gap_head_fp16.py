"""Video classifier head in fp16: Conv3d + ReLU, then adaptive_avg_pool3d to one voxel and flatten."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1).half()

    def forward(self, x):
        return F.adaptive_avg_pool3d(F.relu(self.conv(x)), 1).flatten(1)


batch_size = 8
in_channels = 64
out_channels = 128
depth = 16
height = width = 28


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width).half()]


def get_init_inputs():
    return [in_channels, out_channels]
