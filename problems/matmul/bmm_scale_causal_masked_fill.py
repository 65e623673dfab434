"""Causal attention scores: torch.bmm of q and k^T, scaled, then masked_fill of the future positions with -1e4."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, seq_len, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5
        future = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("future", future)

    def forward(self, q, k):
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        return scores.masked_fill(self.future, -1e4)


batch_heads = 256
seq_len = 256
head_dim = 64


def get_inputs():
    return [torch.randn(batch_heads, seq_len, head_dim), torch.randn(batch_heads, seq_len, head_dim)]


def get_init_inputs():
    return [seq_len, head_dim]
