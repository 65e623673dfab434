"""Downsampling stage at inference: bias-free stride-2 3x3 Conv2d, BatchNorm2d in eval mode, then SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels, eps=1e-3)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.eval()  # the whole model runs as at inference

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


batch_size = 32
in_channels = 64
out_channels = 128
height = width = 112


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
