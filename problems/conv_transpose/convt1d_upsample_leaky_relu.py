"""Vocoder upsampling: ConvTranspose1d (kernel 16, stride 8) that halves the channels, then leaky ReLU (slope 0.1)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.up = nn.ConvTranspose1d(in_channels, out_channels, 2 * stride, stride=stride, padding=stride // 2)

    def forward(self, x):
        return F.leaky_relu(self.up(x), 0.1)


batch_size = 16
in_channels = 256
out_channels = 128
length = 256
stride = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, stride]
