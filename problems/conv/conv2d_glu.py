"""Conv2d producing twice the channels, then a gated linear unit (GLU) over the channel dim."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 2 * out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        x = self.conv(x)
        return F.glu(x, dim=1)


batch_size = 32
in_channels = 64
out_channels = 64
height = width = 64
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
