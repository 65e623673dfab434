"""Depthwise 7x7 Conv2d, then SiLU, added back onto the block input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x):
        y = self.depthwise(x)
        return x + F.silu(y)


batch_size = 32
channels = 256
height = width = 56
kernel_size = 7


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
