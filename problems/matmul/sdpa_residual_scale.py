"""Scaled dot-product attention, then a scaled residual add of the query."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, residual_scale):
        super().__init__()
        self.residual_scale = residual_scale

    def forward(self, q, k, v):
        out = F.scaled_dot_product_attention(q, k, v)
        return out + self.residual_scale * q


batch_size = 8
heads = 8
seq_len = 256
head_dim = 64
residual_scale = 0.5


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [residual_scale]
