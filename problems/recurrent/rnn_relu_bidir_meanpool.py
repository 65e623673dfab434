"""A bias-free bidirectional nn.RNN with ReLU over batch-first sequences, mean-pooled over time, then a linear layer and a sigmoid."""
import torch
import torch.nn as nn

batch_size = 64
seq_len = 256
input_size = 96
hidden_size = 192
num_labels = 24


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_labels):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size, nonlinearity="relu", bias=False, batch_first=True,
                          bidirectional=True)
        self.fc = nn.Linear(2 * hidden_size, num_labels)

    def forward(self, x):
        out, _ = self.rnn(x * 0.5)
        return torch.sigmoid(self.fc(out.mean(dim=1)))


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_labels]
