"""bf16 SwiGLU on (batch, seq, dim): separate bias-free gate and up nn.Linear projections, silu(gate) * up."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, model_dim, hidden_dim):
        super().__init__()
        self.gate_proj = nn.Linear(model_dim, hidden_dim, bias=False, dtype=torch.bfloat16)
        self.up_proj = nn.Linear(model_dim, hidden_dim, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return F.silu(self.gate_proj(x)) * self.up_proj(x)


batch_size = 4
seq_len = 1024
model_dim = 2048
hidden_dim = 5632


def get_inputs():
    return [torch.randn(batch_size, seq_len, model_dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return [model_dim, hidden_dim]
