"""Sequence classifier: a two-layer batch-first LSTM, its last step's output through a linear layer, then log_softmax."""
import torch
import torch.nn as nn

batch_size = 64
seq_len = 100
embed_size = 300
hidden_size = 256
num_classes = 20


class Model(nn.Module):
    def __init__(self, embed_size, hidden_size, num_classes):
        super().__init__()
        self.lstm = nn.LSTM(embed_size, hidden_size, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return torch.log_softmax(self.fc(out[:, -1, :]), dim=1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_size)]


def get_init_inputs():
    return [embed_size, hidden_size, num_classes]
