"""Depthwise Conv2d with a channel multiplier of 2 (each input channel makes two outputs), then hardswish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, multiplier, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels * multiplier, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x):
        return F.hardswish(self.conv(x))


batch_size = 32
channels = 64
multiplier = 2
height = width = 56
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, multiplier, kernel_size]
