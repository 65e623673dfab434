"""MobileNetV3-style downsampling: depthwise 5x5 stride-2 Conv2d with bias, then hardswish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 5, stride=2, padding=2, groups=channels)

    def forward(self, x):
        return F.hardswish(self.conv(x))


batch_size = 64
channels = 128
height = width = 56


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
