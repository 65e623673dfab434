"""5-D per-channel affine with (C, 1, 1, 1) scale and shift on an NCDHW volume, then hardswish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, param_shape):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(param_shape))
        self.shift = nn.Parameter(torch.randn(param_shape))

    def forward(self, x):
        return F.hardswish(x * self.scale + self.shift)


batch_size = 4
num_channels = 32
depth, height, width = 16, 64, 64
param_shape = (num_channels, 1, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, num_channels, depth, height, width)]


def get_init_inputs():
    return [param_shape]
