"""ViT patch embedding: Conv2d from 3 channels with kernel 16 and stride 16 (non-overlapping patches), then exact GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, embed_dim, patch):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed_dim, patch, stride=patch)

    def forward(self, x):
        return F.gelu(self.proj(x))


batch_size = 32
in_channels = 3
embed_dim = 384
patch = 16
height = width = 224


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, embed_dim, patch]
