"""A three-layer time-major LSTM with a projection (proj_size) started from given (h0, c0), then tanh of its outputs times a learned gain plus the last layer's final cell state."""
import torch
import torch.nn as nn

seq_len = 100
batch_size = 16
input_size = 80
hidden_size = 512
proj_size = 128
num_layers = 3


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, proj_size, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=num_layers, proj_size=proj_size)
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, proj_size))
        self.cell_mix = nn.Linear(hidden_size, proj_size, bias=False)

    def forward(self, x, h0, c0):
        out, (hn, cn) = self.lstm(x, (h0, c0))
        return torch.tanh(out) * self.gain + self.cell_mix(cn[-1])


def get_inputs():
    return [torch.randn(seq_len, batch_size, input_size),
            torch.randn(num_layers, batch_size, proj_size) * 0.1,
            torch.randn(num_layers, batch_size, hidden_size) * 0.1]


def get_init_inputs():
    return [input_size, hidden_size, proj_size, num_layers]
