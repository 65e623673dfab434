"""Channels-last network: Conv2d on NHWC data, ReLU, then a 3x3 stride-2 max pool that reads the channels side by side."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1).to(memory_format=torch.channels_last)

    def forward(self, x):
        x = x.contiguous(memory_format=torch.channels_last)
        return F.max_pool2d(F.relu(self.conv(x)), 3, stride=2, padding=1)


batch_size = 32
in_channels = 64
out_channels = 128
height = width = 56


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
