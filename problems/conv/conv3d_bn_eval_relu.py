"""Video Conv-BN-ReLU at inference: bias-free 3x3x3 Conv3d, BatchNorm3d in eval mode, ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm3d(out_channels)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.bn.eval()

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


batch_size = 16
in_channels = 32
out_channels = 64
frames = 8
height = width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, frames, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
