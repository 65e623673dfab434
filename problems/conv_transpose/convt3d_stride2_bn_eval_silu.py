"""3-D decoder upsampling at inference: bias-free ConvTranspose3d (kernel 2, stride 2), BatchNorm3d in eval mode, SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose3d(in_channels, out_channels, 2, stride=2, bias=False)
        self.bn = nn.BatchNorm3d(out_channels)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.bn.eval()

    def forward(self, x):
        return F.silu(self.bn(self.up(x)))


batch_size = 32
in_channels = 64
out_channels = 32
depth = 8
height = width = 16


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
