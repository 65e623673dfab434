"""fp16: depthwise 3x3 Conv2d with same padding, then SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels,
                              dtype=torch.float16)

    def forward(self, x):
        return F.silu(self.conv(x))


batch_size = 32
channels = 256
height = width = 28
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, channels, height, width, dtype=torch.float16)]


def get_init_inputs():
    return [channels, kernel_size]
