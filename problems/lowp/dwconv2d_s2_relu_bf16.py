"""bf16: depthwise 5x5 stride-2 Conv2d (downsampling), then ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, kernel_size, stride):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, stride=stride, padding=kernel_size // 2,
                              groups=channels, dtype=torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch_size = 16
channels = 128
height = width = 64
kernel_size = 5
stride = 2


def get_inputs():
    return [torch.rand(batch_size, channels, height, width, dtype=torch.bfloat16)]


def get_init_inputs():
    return [channels, kernel_size, stride]
