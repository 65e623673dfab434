"""InstanceNorm1d with affine parameters and tracked running statistics (training mode), then ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm = nn.InstanceNorm1d(channels, affine=True, track_running_stats=True)

    def forward(self, x):
        return torch.relu(self.norm(x))


batch_size = 16
channels = 128
length = 4096


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels]
