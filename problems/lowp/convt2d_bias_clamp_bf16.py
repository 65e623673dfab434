"""bf16: 2x upsampling ConvTranspose2d, then a per-channel bias add and a clamp to given bounds."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias_shape, clamp_min, clamp_max):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, dtype=torch.bfloat16,
        )
        self.bias = nn.Parameter(torch.randn(bias_shape, dtype=torch.bfloat16))
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.conv_transpose(x)
        x = x + self.bias
        return torch.clamp(x, min=self.clamp_min, max=self.clamp_max)


batch_size = 16
in_channels = 64
out_channels = 32
height = width = 64
kernel_size = 4
stride = 2
padding = 1
bias_shape = (out_channels, 1, 1)
clamp_min = -1.0
clamp_max = 1.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, bias_shape, clamp_min, clamp_max]
