"""Conformer convolution module core: depthwise Conv1d (kernel 31, same padding) along time, then SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.depthwise = nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x):
        return F.silu(self.depthwise(x))


batch_size = 16
channels = 256
time_steps = 1024
kernel_size = 31


def get_inputs():
    return [torch.randn(batch_size, channels, time_steps)]


def get_init_inputs():
    return [channels, kernel_size]
