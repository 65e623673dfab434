"""nn.Linear on a (batch, seq, features) input, then swish and a residual add of the input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, x):
        y = self.proj(x)
        y = y * torch.sigmoid(y)
        return x + y


batch_size = 16
seq_len = 256
hidden_size = 1024


def get_inputs():
    return [torch.rand(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size]
