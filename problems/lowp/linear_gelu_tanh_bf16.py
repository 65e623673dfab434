"""bf16: MLP up-projection, nn.Linear then the tanh-approximated GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, dtype=torch.bfloat16)

    def forward(self, x):
        return F.gelu(self.fc(x), approximate="tanh")


batch_size = 512
in_features = 2048
out_features = 8192


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features]
