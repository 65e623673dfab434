"""bf16: leaky ReLU, then an adaptive max pool from an odd 45x45 map to 6x6 (windows of 8 and 9)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, slope):
        super().__init__()
        self.slope = slope

    def forward(self, x):
        return F.adaptive_max_pool2d(F.leaky_relu(x, self.slope), (6, 6))


batch_size = 64
channels = 96
height = width = 45
slope = 0.1


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=torch.bfloat16)]


def get_init_inputs():
    return [slope]
