"""An LSTM cell written by hand (one gate GEMM over [x_t, h]) run over 64 time steps, its hidden states averaged over time, then a linear layer."""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 64
input_size = 128
hidden_size = 256
out_size = 128


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, out_size):
        super().__init__()
        self.gates = nn.Linear(input_size + hidden_size, 4 * hidden_size)
        self.fc = nn.Linear(hidden_size, out_size)
        self.hidden_size = hidden_size

    def forward(self, x):
        b, steps, _ = x.shape
        h = x.new_zeros(b, self.hidden_size)
        c = x.new_zeros(b, self.hidden_size)
        total = x.new_zeros(b, self.hidden_size)
        for t in range(steps):
            i, f, g, o = self.gates(torch.cat([x[:, t], h], dim=1)).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            total = total + h
        return self.fc(total / steps)


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, out_size]
