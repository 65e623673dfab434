"""torch.matmul of a (batch, rows, K) activation with a (K, N) weight, plus an (N,) bias, summed over the last dim."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) * in_features ** -0.5)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        return (torch.matmul(x, self.weight) + self.bias).sum(dim=-1)


batch_size = 16
rows = 512
in_features = 512
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, rows, in_features)]


def get_init_inputs():
    return [in_features, out_features]
