"""A GRU cell written by hand and run over 48 time steps (input and hidden projections, reset and update gates), then a linear readout of the last hidden state with tanh."""
import torch
import torch.nn as nn

batch_size = 64
seq_len = 48
input_size = 128
hidden_size = 256
out_size = 64


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, out_size):
        super().__init__()
        self.x2g = nn.Linear(input_size, 3 * hidden_size)
        self.h2g = nn.Linear(hidden_size, 3 * hidden_size)
        self.readout = nn.Linear(hidden_size, out_size)

    def forward(self, x, h):
        for t in range(x.shape[1]):
            xr, xz, xn = self.x2g(x[:, t]).chunk(3, dim=1)
            hr, hz, hn = self.h2g(h).chunk(3, dim=1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1.0 - z) * n + z * h
        return torch.tanh(self.readout(h))


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size), torch.randn(batch_size, hidden_size) * 0.1]


def get_init_inputs():
    return [input_size, hidden_size, out_size]
