"""Conv2d, then a BatchNorm2d kept in eval mode (running statistics: pointwise) and ReLU6."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.bn.eval()

    def forward(self, x):
        return F.relu6(self.bn(self.conv(x)))


batch_size = 64
in_channels = 128
out_channels = 256
height = width = 28


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
