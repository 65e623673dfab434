"""Audio-encoder downsampling: stride-2 Conv1d (kernel 4) that doubles the channels, then ReLU and a scalar scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size=4, stride=2, padding=1)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.conv(x)) * self.scale


batch_size = 64
in_channels = 64
out_channels = 128
length = 4096
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, scale]
