"""Attention: bmm of queries and keys, scaled, softmax over keys, bmm with values."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k, v):
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        attn = torch.softmax(scores, dim=-1)
        return torch.bmm(attn, v)


batch_heads = 64
seq_len = 512
head_dim = 64


def get_inputs():
    return [torch.randn(batch_heads, seq_len, head_dim), torch.randn(batch_heads, seq_len, head_dim),
            torch.randn(batch_heads, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim]
