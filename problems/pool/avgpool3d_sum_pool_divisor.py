"""Sum pooling over a volume: avg_pool3d with divisor_override=1 over 2x3x3 windows, then tanh."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(F.avg_pool3d(x, (2, 3, 3), stride=(2, 2, 2), padding=(0, 1, 1), divisor_override=1))


batch_size = 8
channels = 32
depth = 17
height = width = 63


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return []
