"""Linear over (batch, tokens, features), a learned temperature, then softmax over the last dim."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.log_temp = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        x = self.fc(x) * torch.exp(self.log_temp)
        return torch.softmax(x, dim=-1)


batch_size = 32
tokens = 128
in_features = 768
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, tokens, in_features)]


def get_init_inputs():
    return [in_features, out_features]
