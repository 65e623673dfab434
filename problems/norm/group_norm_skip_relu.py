"""GroupNorm of a skip-connection sum, then ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x, skip):
        return torch.relu(self.norm(x + skip))


batch_size = 32
channels = 64
groups = 8
height = width = 56


def get_inputs():
    return [torch.randn(batch_size, channels, height, width), torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, groups]
