"""Conv2d, then a channels-first layer norm written out: mean over channels, variance of the centred values, affine."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, eps):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.weight = nn.Parameter(torch.rand(out_channels) + 0.5)
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)
        self.eps = eps

    def forward(self, x):
        y = self.conv(x)
        u = y.mean(1, keepdim=True)
        s = (y - u).pow(2).mean(1, keepdim=True)
        y = (y - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * y + self.bias[:, None, None]


batch_size = 16
in_channels = 32
out_channels = 96
height = 56
width = 56
eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, eps]
