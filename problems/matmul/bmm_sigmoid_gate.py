"""Batched matmul with torch.bmm, then gated by the sigmoid of a full-size third input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, gate):
        y = torch.bmm(a, b)
        return y * torch.sigmoid(gate)


batch_size = 32
m = 256
k = 512
n = 384


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n), torch.randn(batch_size, m, n)]


def get_init_inputs():
    return []
