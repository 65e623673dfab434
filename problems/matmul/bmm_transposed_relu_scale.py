"""Scores of two batched sequences, bmm(a, b^T), then ReLU and a scale (a relu-attention logit)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return torch.relu(torch.bmm(a, b.transpose(1, 2))) * self.scale


batch_size = 32
seq_a = 256
seq_b = 384
dim = 128


def get_inputs():
    return [torch.randn(batch_size, seq_a, dim), torch.randn(batch_size, seq_b, dim)]


def get_init_inputs():
    return [dim ** -0.5]
