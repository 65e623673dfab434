"""MobileNetV3 head: 1x1 Conv2d, hardswish, a global average pool written as avg_pool2d over the whole map, then Linear and hardswish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, channels, hidden):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 1)
        self.fc = nn.Linear(channels, hidden)

    def forward(self, x):
        x = F.hardswish(self.conv(x))
        x = F.avg_pool2d(x, x.shape[-2:]).flatten(1)
        return F.hardswish(self.fc(x))


batch_size = 64
in_channels = 160
channels = 960
hidden = 1280
height = width = 7


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, channels, hidden]
