"""Transformer output projection: bias-free nn.Linear on (batch, tokens, dim), a per-feature layer scale, residual add."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, init_scale):
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.gamma = nn.Parameter(torch.full((dim,), init_scale))

    def forward(self, x, residual):
        return residual + self.gamma * self.proj(x)


batch_size = 32
tokens = 196
dim = 768
init_scale = 0.1


def get_inputs():
    return [torch.randn(batch_size, tokens, dim), torch.randn(batch_size, tokens, dim)]


def get_init_inputs():
    return [dim, init_scale]
