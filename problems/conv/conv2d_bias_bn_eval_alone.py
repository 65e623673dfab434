"""Conv2d with bias, then BatchNorm2d in eval mode and nothing else: the last layer of a block at inference."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)
        self.bn.weight.data.uniform_(0.5, 1.5)
        self.bn.bias.data.normal_(0, 0.1)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x):
        return self.bn(self.conv(x))


batch_size = 32
in_channels = 64
out_channels = 128
height = width = 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
