"""Context gate: per-channel bias, a dilated 3x3 max pool (stride 1, dilation 2, padding 1), then sigmoid."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1) * 0.1)

    def forward(self, x):
        y = F.max_pool2d(x + self.bias, 3, stride=1, padding=1, dilation=2)
        return torch.sigmoid(y)


batch_size = 16
channels = 64
height = 97
width = 101


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
