"""ConvNeXt-style: depthwise 7x7 Conv2d, a learned per-channel layer scale, added back onto the block input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size, layer_scale):
        super().__init__()
        self.dwconv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)
        self.gamma = nn.Parameter(layer_scale * torch.rand(channels, 1, 1))

    def forward(self, x):
        return x + self.gamma * self.dwconv(x)


batch_size = 16
channels = 128
height = width = 56
kernel_size = 7
layer_scale = 0.5


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, layer_scale]
