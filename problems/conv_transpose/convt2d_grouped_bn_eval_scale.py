"""Grouped ConvTranspose2d (stride 2), BatchNorm2d in eval mode, then a constant output scale; nothing else."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups, scale):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1, groups=groups)
        self.bn = nn.BatchNorm2d(out_channels)
        self.bn.weight.data.uniform_(0.5, 1.5)
        self.bn.bias.data.normal_(0, 0.1)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.bn.eval()
        self.scale = scale

    def forward(self, x):
        return self.bn(self.up(x)) * self.scale


batch_size = 32
in_channels = 128
out_channels = 64
groups = 4
scale = 0.5
height = width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups, scale]
