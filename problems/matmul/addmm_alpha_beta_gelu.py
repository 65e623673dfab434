"""torch.addmm with beta=0.5 and alpha=2.0 (0.5 * bias + 2 * x @ W), then the tanh-approximated GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) * in_features ** -0.5)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return F.gelu(torch.addmm(self.bias, x, self.weight, beta=0.5, alpha=2.0), approximate="tanh")


batch_size = 512
in_features = 1024
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
