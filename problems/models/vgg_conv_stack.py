"""VGG-style stack: two stages of two 3x3 conv + ReLU layers, each stage closed by a 2x2 max pool."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, widths):
        super().__init__()
        layers = []
        c = in_channels
        for w in widths:
            layers.append(nn.ModuleList([nn.Conv2d(c, w, 3, padding=1), nn.Conv2d(w, w, 3, padding=1)]))
            c = w
        self.stages = nn.ModuleList(layers)

    def forward(self, x):
        for first, second in self.stages:
            x = F.relu(second(F.relu(first(x))))
            x = F.max_pool2d(x, 2)
        return x


# About 55 GFLOP of convolutions at 112x112 and 56x56: roughly 2-4 ms eager on an H200.
batch_size = 16
in_channels = 64
widths = (64, 128)
size = 112


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, widths]
