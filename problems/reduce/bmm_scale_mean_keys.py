"""Attention scores q @ k^T with torch.bmm, scaled by 1/sqrt(head_dim), then the mean over the keys (last dim)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k):
        return (torch.bmm(q, k.transpose(1, 2)) * self.scale).mean(dim=-1)


batch_heads = 128
seq_len = 512
head_dim = 64


def get_inputs():
    return [torch.randn(batch_heads, seq_len, head_dim), torch.randn(batch_heads, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim]
