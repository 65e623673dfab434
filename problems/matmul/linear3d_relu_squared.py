"""Batched nn.Linear on (batch, tokens, features), then squared ReLU (relu(x) ** 2, as in Primer)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x)) ** 2


batch_size = 16
tokens = 256
in_features = 1024
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, tokens, in_features)]


def get_init_inputs():
    return [in_features, out_features]
