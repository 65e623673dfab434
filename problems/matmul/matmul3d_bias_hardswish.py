"""torch.matmul of a 3-D activation with a 2-D weight, a row-vector bias add, then hardswish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) * in_features ** -0.5)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        x = torch.matmul(x, self.weight) + self.bias
        return F.hardswish(x)


batch_size = 8
seq_len = 1024
in_features = 512
out_features = 1536


def get_inputs():
    return [torch.rand(batch_size, seq_len, in_features)]


def get_init_inputs():
    return [in_features, out_features]
