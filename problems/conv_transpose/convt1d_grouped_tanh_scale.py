"""Grouped ConvTranspose1d (4 groups, kernel 4, stride 2) doubling the length, then tanh and a scalar scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, groups, scale):
        super().__init__()
        self.up = nn.ConvTranspose1d(channels, channels, 4, stride=2, padding=1, groups=groups)
        self.scale = scale

    def forward(self, x):
        return torch.tanh(self.up(x)) * self.scale


batch_size = 64
channels = 128
length = 1024
groups = 4
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, groups, scale]
