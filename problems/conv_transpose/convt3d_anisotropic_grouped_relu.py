"""Grouped ConvTranspose3d upsampling height and width only (kernel (1, 4, 4), stride (1, 2, 2), padding (0, 1, 1), output padding (0, 1, 1)), then ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.up = nn.ConvTranspose3d(in_channels, out_channels, (1, 4, 4), stride=(1, 2, 2), padding=(0, 1, 1),
                                     output_padding=(0, 1, 1), groups=groups)

    def forward(self, x):
        return torch.relu(self.up(x))


batch_size = 4
in_channels = 64
out_channels = 32
groups = 2
depth, height, width = 8, 32, 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
