"""A four-layer batch-first GRU started from a given h0, added back onto its input, then layer norm."""
import torch
import torch.nn as nn

batch_size = 16
seq_len = 256
d_model = 256
num_layers = 4


class Model(nn.Module):
    def __init__(self, d_model, num_layers):
        super().__init__()
        self.gru = nn.GRU(d_model, d_model, num_layers=num_layers, batch_first=True)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x, h0):
        out, _ = self.gru(x, h0)
        return self.norm(out + x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model), torch.randn(num_layers, batch_size, d_model) * 0.1]


def get_init_inputs():
    return [d_model, num_layers]
