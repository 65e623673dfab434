"""A gated residual: x + sigmoid(gate(x)) * tanh(value(x)), two square nn.Linear layers on (batch, tokens, dim)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gate = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)

    def forward(self, x):
        return x + torch.sigmoid(self.gate(x)) * torch.tanh(self.value(x))


batch_size = 16
tokens = 256
dim = 512


def get_inputs():
    return [torch.randn(batch_size, tokens, dim)]


def get_init_inputs():
    return [dim]
