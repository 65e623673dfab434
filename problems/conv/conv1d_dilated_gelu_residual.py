"""Temporal-conv (TCN) block: dilated Conv1d that keeps the length, then exact GELU and a residual add of the input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size, dilation):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, padding=dilation * (kernel_size - 1) // 2,
                              dilation=dilation)

    def forward(self, x):
        return x + F.gelu(self.conv(x))


batch_size = 32
channels = 128
length = 2048
kernel_size = 3
dilation = 4


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, kernel_size, dilation]
