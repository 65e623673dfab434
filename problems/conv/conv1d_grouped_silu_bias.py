"""Grouped Conv1d (8 groups, kernel 5, same length), then SiLU and a learned (C, 1) bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size=5, padding=2, groups=groups)
        self.bias = nn.Parameter(torch.randn(channels, 1) * 0.1)

    def forward(self, x):
        return F.silu(self.conv(x)) + self.bias


batch_size = 32
channels = 256
length = 1024
groups = 8


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, groups]
