"""ResNet-50 conv2_x stage at inference: three bottleneck blocks (1x1, 3x3, 1x1 convs with eval-mode batch norm), the first with a projection shortcut."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    def __init__(self, in_channels, width, out_channels):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.shortcut = None
        if in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, bias=False),
                                          nn.BatchNorm2d(out_channels))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(y + skip)


class Model(nn.Module):
    def __init__(self, in_channels, width, out_channels, blocks):
        super().__init__()
        self.blocks = nn.Sequential(Bottleneck(in_channels, width, out_channels),
                                    *[Bottleneck(out_channels, width, out_channels) for _ in range(blocks - 1)])
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
        self.eval()

    def forward(self, x):
        return self.blocks(x)


# About 45 GFLOP of convolutions and 1 GB of activation traffic: roughly 2-3 ms eager on an H200.
batch_size = 32
in_channels = 64
width = 64
out_channels = 256
blocks = 3
size = 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, width, out_channels, blocks]
