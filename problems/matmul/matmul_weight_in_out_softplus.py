"""x @ W with W held (in, out) (no transpose), a bias, then softplus with beta=2."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / in_features ** 0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return F.softplus(x @ self.weight + self.bias, beta=2.0)


batch_size = 2048
in_features = 1024
out_features = 768


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
