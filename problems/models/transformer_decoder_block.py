"""GPT-style decoder block: LayerNorm, causal multi-head self-attention with its mask built in forward (ones, triu, masked_fill), LayerNorm, GELU MLP, residual adds."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        mask = torch.ones(t, t, device=x.device).triu(1).bool()
        scores = (q @ k.transpose(-2, -1)) / (d // h) ** 0.5
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.out(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


# About 60 GFLOP (fp32 GEMMs) over 8192 tokens and 0.5 GB of attention scores: roughly 2-3 ms eager on an H200.
batch_size = 16
seq_len = 512
dim = 512
heads = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads]
