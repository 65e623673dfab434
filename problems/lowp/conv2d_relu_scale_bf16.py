"""bf16: same-padded Conv2d, then ReLU and a scalar scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, dtype=torch.bfloat16)
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        return torch.relu(x) * self.scale


batch_size = 16
in_channels = 128
out_channels = 128
height = width = 56
kernel_size = 3
scale = 0.75


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
