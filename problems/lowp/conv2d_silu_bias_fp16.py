"""fp16: same-padded Conv2d, then SiLU and a per-channel bias add."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, dtype=torch.float16)
        self.bias = nn.Parameter(torch.randn(bias_shape, dtype=torch.float16))

    def forward(self, x):
        x = self.conv(x)
        return F.silu(x) + self.bias


batch_size = 32
in_channels = 64
out_channels = 128
height = width = 64
kernel_size = 3
bias_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width, dtype=torch.float16)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
