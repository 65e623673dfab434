"""Max over the time dim of a (32, 512, 256) sequence, values only (max-over-time pooling), then tanh."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        values, _ = torch.max(x, dim=1)
        return torch.tanh(values)


batch_size = 32
steps = 512
features = 256


def get_inputs():
    return [torch.randn(batch_size, steps, features)]


def get_init_inputs():
    return []
