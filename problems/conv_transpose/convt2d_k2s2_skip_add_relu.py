"""U-Net decoder step: 2x upsampling ConvTranspose2d (kernel 2, stride 2), plus the encoder's skip tensor, then ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, 2, stride=2)

    def forward(self, x, skip):
        return torch.relu(self.up(x) + skip)


batch_size = 16
in_channels = 128
out_channels = 64
height = width = 64


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    skip = torch.randn(batch_size, out_channels, 2 * height, 2 * width)
    return [x, skip]


def get_init_inputs():
    return [in_channels, out_channels]
