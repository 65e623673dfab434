"""Text CNN over a token sequence: Conv1d, ReLU, then a max pool of 3 with stride 2 and padding 1 along the sequence."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, embed_dim, channels):
        super().__init__()
        self.conv = nn.Conv1d(embed_dim, channels, 5, padding=2)

    def forward(self, x):
        return F.max_pool1d(F.relu(self.conv(x)), 3, stride=2, padding=1)


batch_size = 64
embed_dim = 300
channels = 256
seq_len = 1001


def get_inputs():
    return [torch.randn(batch_size, embed_dim, seq_len)]


def get_init_inputs():
    return [embed_dim, channels]
