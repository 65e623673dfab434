"""Token pooling: Linear over (batch, tokens, features), GELU, transpose, then an adaptive average pool of 197 tokens down to 49."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features, tokens_out):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.tokens_out = tokens_out

    def forward(self, x):
        x = F.gelu(self.fc(x)).transpose(1, 2)
        return F.adaptive_avg_pool1d(x, self.tokens_out)


batch_size = 32
tokens = 197
features = 768
tokens_out = 49


def get_inputs():
    return [torch.randn(batch_size, tokens, features)]


def get_init_inputs():
    return [features, tokens_out]
