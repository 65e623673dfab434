"""BatchNorm2d in training mode on odd sizes (24 x 48 x 37 x 37), then hardswish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, momentum=0.2)

    def forward(self, x):
        return F.hardswish(self.bn(x))


batch_size = 24
channels = 48
height = width = 37


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 2 + 0.5]


def get_init_inputs():
    return [channels]
