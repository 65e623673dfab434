"""A three-layer time-major nn.RNN with tanh, then a linear readout at every step and a softmax over its features."""
import torch
import torch.nn as nn

seq_len = 200
batch_size = 32
input_size = 64
hidden_size = 256
out_size = 64


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, out_size):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size, num_layers=3, nonlinearity="tanh")
        self.readout = nn.Linear(hidden_size, out_size)

    def forward(self, x):
        out, _ = self.rnn(x)
        return torch.softmax(self.readout(out), dim=-1)


def get_inputs():
    return [torch.randn(seq_len, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, out_size]
