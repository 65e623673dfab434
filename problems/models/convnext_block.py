"""ConvNeXt block: depthwise 7x7 conv, LayerNorm over channels in channels-last order, pointwise MLP with GELU, a learned layer scale, residual add."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


# About 27 GFLOP (two GEMMs over 100k pixels) and 1.5 GB of traffic: roughly 1.5-2.5 ms eager on an H200.
batch_size = 32
dim = 128
size = 56


def get_inputs():
    return [torch.randn(batch_size, dim, size, size)]


def get_init_inputs():
    return [dim]
