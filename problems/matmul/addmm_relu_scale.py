"""torch.addmm with a learned bias and (in, out) weight, then ReLU and a scalar scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) * in_features ** -0.5)
        self.bias = nn.Parameter(torch.randn(out_features))
        self.scale = scale

    def forward(self, x):
        x = torch.addmm(self.bias, x, self.weight)
        x = torch.relu(x)
        return x * self.scale


batch_size = 1024
in_features = 1024
out_features = 2048
scale = 0.125


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
