"""Self-gating with a (1, C, 1, 1) bias: x * sigmoid(x + bias)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return x * torch.sigmoid(x + self.bias)


batch_size = 16
num_channels = 96
height = width = 56
bias_shape = (1, num_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, num_channels, height, width)]


def get_init_inputs():
    return [bias_shape]
