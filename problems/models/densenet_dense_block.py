"""DenseNet dense block at inference: four BN-ReLU-1x1 conv, BN-ReLU-3x3 conv layers, each concatenating its new features onto everything before it."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class DenseLayer(nn.Module):
    def __init__(self, in_channels, growth, bottleneck):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, bottleneck * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(bottleneck * growth)
        self.conv2 = nn.Conv2d(bottleneck * growth, growth, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.conv1(F.relu(self.bn1(x)))
        return self.conv2(F.relu(self.bn2(y)))


class Model(nn.Module):
    def __init__(self, in_channels, growth, bottleneck, layers):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(in_channels + i * growth, growth, bottleneck) for i in range(layers))
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x):
        for layer in self.layers:
            x = torch.cat([x, layer(x)], dim=1)
        return x


# About 25 GFLOP of convolutions and 1.5 GB of traffic (the concatenations copy): roughly 1.5-2.5 ms eager on an H200.
batch_size = 32
in_channels = 64
growth = 32
bottleneck = 4
layers = 4
size = 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, growth, bottleneck, layers]
