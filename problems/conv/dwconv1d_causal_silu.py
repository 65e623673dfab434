"""Mamba-style causal depthwise Conv1d (kernel 4, padded by 3, trimmed back to the input length), then SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, d_inner, kernel_size):
        super().__init__()
        self.conv1d = nn.Conv1d(d_inner, d_inner, kernel_size, padding=kernel_size - 1, groups=d_inner)

    def forward(self, x):
        seq_len = x.shape[-1]
        return F.silu(self.conv1d(x)[..., :seq_len])


batch_size = 8
d_inner = 1536
seq_len = 1024
kernel_size = 4


def get_inputs():
    return [torch.randn(batch_size, d_inner, seq_len)]


def get_init_inputs():
    return [d_inner, kernel_size]
