"""Conv2d with a different kernel, stride, padding and dilation per spatial dim (5x3, stride (2, 1), padding (4, 1), dilation (2, 1)), then ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, (5, 3), stride=(2, 1), padding=(4, 1), dilation=(2, 1))

    def forward(self, x):
        return torch.relu(self.conv(x))


batch_size = 16
in_channels = 64
out_channels = 96
height, width = 128, 80


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
