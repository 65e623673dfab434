"""A two-layer bidirectional LSTM over batch-first sequences, then a per-step linear head with GELU and a learned layer scale."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
seq_len = 128
input_size = 128
hidden_size = 256
head_size = 128


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, head_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden_size, head_size)
        self.scale = nn.Parameter(torch.full((head_size,), 0.5))

    def forward(self, x):
        out, _ = self.lstm(x)
        return F.gelu(self.head(out)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, head_size]
