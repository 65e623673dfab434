"""An Elman RNN written by hand: the hidden state comes in as an input, each of 64 steps is tanh of an input and a recurrent projection, and the outputs are a leaky-ReLU readout of the final state."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
seq_len = 64
input_size = 64
hidden_size = 256
out_size = 32


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, out_size):
        super().__init__()
        self.i2h = nn.Linear(input_size, hidden_size)
        self.h2h = nn.Linear(hidden_size, hidden_size, bias=False)
        self.h2o = nn.Linear(hidden_size, out_size)

    def forward(self, x, hidden):
        for t in range(x.shape[0]):
            hidden = torch.tanh(self.i2h(x[t]) + self.h2h(hidden))
        return F.leaky_relu(self.h2o(hidden), 0.1)


def get_inputs():
    return [torch.randn(seq_len, batch_size, input_size), torch.randn(batch_size, hidden_size) * 0.1]


def get_init_inputs():
    return [input_size, hidden_size, out_size]
