"""5x5 Conv2d, then softplus of its output added back onto that output, floored at a constant (max with a scalar)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, beta, floor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.beta = beta
        self.floor = floor

    def forward(self, x):
        y = self.conv(x)
        z = y + F.softplus(y, beta=self.beta)
        return torch.clamp(z, min=self.floor)


batch_size = 32
in_channels = 48
out_channels = 96
height = width = 80
kernel_size = 5
beta = 2.0
floor = -0.5


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, beta, floor]
