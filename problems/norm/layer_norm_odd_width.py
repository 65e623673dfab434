"""LayerNorm over rows of an odd width (4096 x 1001)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return self.norm(x)


rows = 4096
features = 1001


def get_inputs():
    return [torch.randn(rows, features) * 3 + 1]


def get_init_inputs():
    return [features]
