"""Stride-2 Conv3d, then ELU and a torch.where that zeroes responses below a threshold."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, alpha, threshold):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2)
        self.alpha = alpha
        self.threshold = threshold

    def forward(self, x):
        x = self.conv(x)
        x = F.elu(x, alpha=self.alpha)
        return torch.where(x > self.threshold, x, torch.zeros_like(x))


batch_size = 2
in_channels = 16
out_channels = 64
depth, height, width = 16, 48, 48
kernel_size = 3
stride = 2
alpha = 1.0
threshold = -0.2


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, alpha, threshold]
