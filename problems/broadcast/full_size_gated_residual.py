"""Two full-size NCHW inputs: x gated by sigmoid(y), plus x as a residual."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return x * torch.sigmoid(y) + x


batch_size = 32
num_channels = 64
height = width = 64


def get_inputs():
    shape = (batch_size, num_channels, height, width)
    return [torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
