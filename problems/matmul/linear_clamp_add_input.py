"""nn.Linear, then a clamp to given bounds and a residual add of a second input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, clamp_min, clamp_max):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x, residual):
        x = self.fc(x)
        x = torch.clamp(x, self.clamp_min, self.clamp_max)
        return x + residual


batch_size = 128
in_features = 4096
out_features = 4096
clamp_min = -1.0
clamp_max = 1.0


def get_inputs():
    return [torch.rand(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features, clamp_min, clamp_max]
