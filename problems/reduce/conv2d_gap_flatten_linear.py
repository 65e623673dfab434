"""Conv2d + ReLU, global average pool, flatten, and a Linear classifier."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, channels, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


batch_size = 64
in_channels = 32
channels = 256
height = width = 32
num_classes = 100


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, channels, num_classes]
