"""ViT-Base encoder block over patch tokens with a learned position embedding: LayerNorm, multi-head attention written with matmuls and softmax, LayerNorm, GELU MLP, residual adds."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, tokens, dim, heads, mlp_ratio):
        super().__init__()
        self.heads = heads
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        h = self.heads
        x = x + self.pos
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, h, d // h).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) * (d // h) ** -0.5, dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


# About 120 GFLOP (fp32 GEMMs) over 8192 tokens: roughly 3-5 ms eager on an H200.
batch_size = 32
tokens = 256
dim = 768
heads = 12
mlp_ratio = 4


def get_inputs():
    return [torch.randn(batch_size, tokens, dim)]


def get_init_inputs():
    return [tokens, dim, heads, mlp_ratio]
