"""fp16: nn.Linear, ReLU, then a constant scale (a quantisation-friendly MLP layer)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, dtype=torch.float16)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.fc(x)) * self.scale


batch_size = 1024
in_features = 2048
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.float16)]


def get_init_inputs():
    return [in_features, out_features, 0.5]
