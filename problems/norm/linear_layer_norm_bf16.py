"""bf16: Linear, then LayerNorm over 2048 features and a residual add of the input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features).to(torch.bfloat16)
        self.norm = nn.LayerNorm(features).to(torch.bfloat16)

    def forward(self, x):
        return x + self.norm(self.fc(x))


batch_size = 16
tokens = 256
features = 2048


def get_inputs():
    return [torch.randn(batch_size, tokens, features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [features]
