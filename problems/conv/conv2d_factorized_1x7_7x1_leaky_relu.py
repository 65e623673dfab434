"""Inception-style factorized 7x7: a (1, 7) Conv2d, leaky ReLU, a (7, 1) Conv2d, leaky ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, slope):
        super().__init__()
        self.row = nn.Conv2d(channels, channels, (1, 7), padding=(0, 3))
        self.col = nn.Conv2d(channels, channels, (7, 1), padding=(3, 0))
        self.slope = slope

    def forward(self, x):
        x = F.leaky_relu(self.row(x), self.slope)
        return F.leaky_relu(self.col(x), self.slope)


batch_size = 32
channels = 64
height = width = 32
slope = 0.1


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, slope]
