"""ResNet downsampling at inference: stride-2 3x3 conv + BN on the main path, stride-2 1x1 conv + BN shortcut, sum, ReLU."""
import torch
import torch.nn as nn


def _eval_bn(channels):
    bn = nn.BatchNorm2d(channels)
    bn.running_mean.normal_(0, 0.1)
    bn.running_var.uniform_(0.5, 2.0)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.normal_(0, 0.1)
    return bn.eval()


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.bn = _eval_bn(out_channels)
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=2, bias=False)
        self.shortcut_bn = _eval_bn(out_channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + self.shortcut_bn(self.shortcut(x)))


batch_size = 32
in_channels = 64
out_channels = 128
height = width = 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
