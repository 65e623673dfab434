"""Conformer-style conv module: depthwise Conv1d (kernel 15), BatchNorm1d in eval mode, SiLU, then a pointwise Conv1d."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.depthwise = nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels,
                                   bias=False)
        self.bn = nn.BatchNorm1d(channels)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.bn.eval()
        self.pointwise = nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        return self.pointwise(F.silu(self.bn(self.depthwise(x))))


batch_size = 32
channels = 256
length = 1024
kernel_size = 15


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, kernel_size]
