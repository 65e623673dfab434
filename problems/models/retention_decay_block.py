"""RetNet-style retention block: Q, K, V projections, a per-head decay mask gamma^(i-j) built in forward from arange, (QK^T * D) V, a SiLU gate and an output projection, residual add."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.gate = nn.Linear(dim, dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def decay(self, t, device):
        gamma = 1.0 - 2.0 ** (-5.0 - torch.arange(self.heads, device=device, dtype=torch.float32))
        i = torch.arange(t, device=device, dtype=torch.float32)
        dist = i[:, None] - i[None, :]
        mask = gamma.log()[:, None, None] * dist.clamp(min=0)
        return torch.exp(mask) * (dist >= 0).float()

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        y = self.norm(x)
        q, k, v = self.qkv(y).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (d // h) ** -0.5 * self.decay(t, x.device)
        r = (scores @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.out(F.silu(self.gate(y)) * r)


# About 60 GFLOP (fp32 GEMMs) over 8192 tokens and 0.5 GB of scores: roughly 2-3 ms eager on an H200.
batch_size = 16
seq_len = 512
dim = 512
heads = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads]
