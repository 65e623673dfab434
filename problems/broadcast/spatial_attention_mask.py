"""Spatial attention: an (N, C, H, W) feature map times the sigmoid of an (N, 1, H, W) attention map."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, attn_logits):
        return x * torch.sigmoid(attn_logits)


batch_size = 32
num_channels = 256
height = width = 48


def get_inputs():
    return [
        torch.randn(batch_size, num_channels, height, width),
        torch.randn(batch_size, 1, height, width),
    ]


def get_init_inputs():
    return []
