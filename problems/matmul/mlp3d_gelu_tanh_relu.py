"""Two-layer feed-forward on (batch, tokens, features): nn.Linear up with tanh GELU, nn.Linear down with ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        x = F.gelu(self.up(x), approximate="tanh")
        return F.relu(self.down(x))


batch_size = 64
tokens = 32
dim = 1024
hidden = 4096


def get_inputs():
    return [torch.randn(batch_size, tokens, dim)]


def get_init_inputs():
    return [dim, hidden]
