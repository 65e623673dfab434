"""nn.Linear, Mish, then a clamp to [-1, 3]."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.clamp(F.mish(self.fc(x)), min=-1.0, max=3.0)


batch_size = 768
in_features = 1536
out_features = 1536


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
