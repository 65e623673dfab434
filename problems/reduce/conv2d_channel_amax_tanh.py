"""Conv2d, then the max over channels (a channel max pool) and tanh."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)

    def forward(self, x):
        x = self.conv(x)
        x = torch.amax(x, dim=1, keepdim=True)
        return torch.tanh(x)


batch_size = 32
in_channels = 16
out_channels = 48
height = width = 96
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
