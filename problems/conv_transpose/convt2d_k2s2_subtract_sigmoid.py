"""U-Net style 2x upsampling ConvTranspose2d (kernel 2, stride 2), then a per-channel subtract and sigmoid."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, shift_shape):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=2, stride=2)
        self.shift = nn.Parameter(torch.randn(shift_shape))

    def forward(self, x):
        x = self.up(x)
        x = x - self.shift
        return torch.sigmoid(x)


batch_size = 8
in_channels = 64
out_channels = 32
height = width = 48
shift_shape = (1, out_channels, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, shift_shape]
