"""Attention scores with torch.bmm, scaled by 1/sqrt(head_dim), then tanh logit soft-capping."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim, softcap):
        super().__init__()
        self.scale = head_dim ** -0.5
        self.softcap = softcap

    def forward(self, q, k):
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        return self.softcap * torch.tanh(scores / self.softcap)


batch_heads = 64
seq_len = 512
head_dim = 64
softcap = 30.0


def get_inputs():
    q = torch.randn(batch_heads, seq_len, head_dim)
    k = torch.randn(batch_heads, seq_len, head_dim)
    return [q, k]


def get_init_inputs():
    return [head_dim, softcap]
