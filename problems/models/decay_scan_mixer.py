"""State-space style token mixer: per-channel decays and inputs from linear projections, the recurrence h_t = a_t h_(t-1) + b_t x_t solved with cumprod and cumsum along time, a SiLU gate, an output projection and a residual add."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        a, u, g = self.proj(self.norm(x)).chunk(3, dim=-1)
        a = 0.95 + 0.05 * torch.sigmoid(a)  # decays in (0.95, 1): the running product stays in range
        p = torch.cumprod(a, dim=1)
        h = p * torch.cumsum(u / p, dim=1)
        return x + self.out(F.silu(g) * h)


# About 35 GFLOP (fp32 GEMMs) and 1 GB of traffic over 4M positions: roughly 1-2 ms eager on an H200.
batch_size = 32
seq_len = 128
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
