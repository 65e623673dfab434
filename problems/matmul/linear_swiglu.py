"""SwiGLU feed-forward gate: one bias-free nn.Linear to 2*hidden, split in two, silu(a) * b."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, model_dim, hidden_dim):
        super().__init__()
        self.gate_up = nn.Linear(model_dim, 2 * hidden_dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return F.silu(gate) * up


num_tokens = 1024
model_dim = 1024
hidden_dim = 2816


def get_inputs():
    return [torch.rand(num_tokens, model_dim)]


def get_init_inputs():
    return [model_dim, hidden_dim]
