"""Multi-head attention scores: 4-D q @ k^T, scaled by 1/sqrt(head_dim), plus an additive (B, 1, L, L) mask input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k, mask):
        return torch.matmul(q, k.transpose(-2, -1)) * self.scale + mask


batch_size = 16
heads = 8
seq_len = 512
head_dim = 64


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim)
    k = torch.randn(batch_size, heads, seq_len, head_dim)
    mask = torch.where(torch.rand(batch_size, 1, seq_len, seq_len) < 0.1, -1e4, 0.0)
    return [q, k, mask]


def get_init_inputs():
    return [head_dim]
