"""ConvTranspose2d upsampling, then softmax over channels and a per-channel weight."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=2, stride=2)
        self.weight = nn.Parameter(torch.rand(out_channels, 1, 1))

    def forward(self, x):
        x = self.up(x)
        return torch.softmax(x, dim=1) * self.weight


batch_size = 16
in_channels = 64
out_channels = 21
height = width = 64


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
