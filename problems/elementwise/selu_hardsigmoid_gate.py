"""SELU of one input gated by the hardsigmoid of another, on an odd-sized matrix."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, g):
        return F.selu(x) * F.hardsigmoid(g)


rows = 2049
cols = 4099


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []
