"""Softmax over one very long row (1 x 262144), with a temperature applied first."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return torch.softmax(x / self.temperature, dim=-1)


rows = 1
cols = 262144
temperature = 0.7


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [temperature]
