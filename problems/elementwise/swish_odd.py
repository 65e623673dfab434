"""Swish written out by hand, x * sigmoid(x), on an odd-sized 1000 x 1023 matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)


rows = 1000
cols = 1023


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
