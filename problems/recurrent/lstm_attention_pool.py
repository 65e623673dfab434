"""An LSTM encoder (bidirectional, batch-first) with additive attention pooling over time, then a linear classifier."""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 160
input_size = 128
hidden_size = 192
attn_size = 128
num_classes = 10


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, attn_size, num_classes):
        super().__init__()
        self.encoder = nn.LSTM(input_size, hidden_size, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * hidden_size, attn_size)
        self.query = nn.Linear(attn_size, 1, bias=False)
        self.fc = nn.Linear(2 * hidden_size, num_classes)

    def forward(self, x):
        out, _ = self.encoder(x)
        scores = self.query(torch.tanh(self.proj(out)))
        weights = torch.softmax(scores, dim=1)
        pooled = (out * weights).sum(dim=1)
        return self.fc(pooled)


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, attn_size, num_classes]
