"""Attention scores scaled, plus a learned (1, heads, L, L) position bias, then softmax over keys."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, heads, seq_len, scale):
        super().__init__()
        self.scale = scale
        self.pos_bias = nn.Parameter(torch.randn(1, heads, seq_len, seq_len) * 0.1)

    def forward(self, scores):
        return torch.softmax(scores * self.scale + self.pos_bias, dim=-1)


batch_size = 32
heads = 16
seq_len = 128
scale = 0.125


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, seq_len)]


def get_init_inputs():
    return [heads, seq_len, scale]
