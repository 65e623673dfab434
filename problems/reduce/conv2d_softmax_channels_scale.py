"""Conv2d, then a softmax over the channel dim (stride H*W in memory) and a learned scalar scale."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        x = self.conv(x)
        return torch.softmax(x, dim=1) * self.scale


batch_size = 32
in_channels = 32
out_channels = 64
height = width = 64
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
