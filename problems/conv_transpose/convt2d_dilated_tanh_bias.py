"""Dilated (2) stride-1 ConvTranspose2d keeping the spatial size, then tanh and a learned (1, C, 1, 1) bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, dilation):
        super().__init__()
        self.convt = nn.ConvTranspose2d(channels, channels, 3, padding=dilation, dilation=dilation)
        self.bias = nn.Parameter(torch.randn(1, channels, 1, 1) * 0.1)

    def forward(self, x):
        return torch.tanh(self.convt(x)) + self.bias


batch_size = 16
channels = 64
height = width = 64
dilation = 2


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, dilation]
