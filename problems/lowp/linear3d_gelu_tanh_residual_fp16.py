"""fp16: nn.Linear on a (batch, seq, hidden) input, tanh-approximated GELU, and a residual add of the input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size, dtype=torch.float16)

    def forward(self, x):
        y = self.dense(x)
        return x + F.gelu(y, approximate="tanh")


batch_size = 8
seq_len = 512
hidden_size = 2048


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size, dtype=torch.float16)]


def get_init_inputs():
    return [hidden_size]
