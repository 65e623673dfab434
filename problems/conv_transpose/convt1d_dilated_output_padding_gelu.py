"""ConvTranspose1d with stride 2, dilation 3 and output padding 2 (even and odd outputs read alternate taps), then exact GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose1d(in_channels, out_channels, 5, stride=2, padding=3, output_padding=2, dilation=3)

    def forward(self, x):
        return F.gelu(self.up(x))


batch_size = 32
in_channels = 128
out_channels = 64
length = 1024


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
