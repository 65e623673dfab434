"""ResNet stem on an odd-sized image: 7x7 stride-2 Conv2d, ReLU, then a 3x3 stride-2 max pool with padding and ceil_mode."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 7, stride=2, padding=3, bias=False)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)

    def forward(self, x):
        return self.pool(F.relu(self.conv(x)))


batch_size = 32
in_channels = 3
out_channels = 64
height = width = 225


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
