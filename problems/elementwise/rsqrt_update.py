"""Adam-style parameter step on three same-size tensors: p - lr * m * rsqrt(v + eps)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, lr, eps):
        super().__init__()
        self.lr = lr
        self.eps = eps

    def forward(self, param, exp_avg, exp_avg_sq):
        return param - self.lr * exp_avg * torch.rsqrt(exp_avg_sq + self.eps)


numel_rows = 4096
numel_cols = 4096
lr = 1e-3
eps = 1e-8


def get_inputs():
    param = torch.randn(numel_rows, numel_cols)
    exp_avg = torch.randn(numel_rows, numel_cols) * 0.01
    exp_avg_sq = torch.rand(numel_rows, numel_cols) * 1e-4
    return [param, exp_avg, exp_avg_sq]


def get_init_inputs():
    return [lr, eps]
