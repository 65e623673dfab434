"""Token projection then mean pooling: nn.Linear on (batch, tokens, features), then the mean over the tokens."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.proj(x).mean(dim=1)


batch_size = 32
tokens = 256
in_features = 768
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, tokens, in_features)]


def get_init_inputs():
    return [in_features, out_features]
