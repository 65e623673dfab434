"""MobileNetV2 inverted residual block at inference: 1x1 expand (x6), BN, ReLU6, 3x3 depthwise, BN, ReLU6, 1x1 project, BN, plus the input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def _eval_bn(channels):
    bn = nn.BatchNorm2d(channels)
    bn.running_mean.normal_(0, 0.1)
    bn.running_var.uniform_(0.5, 2.0)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.normal_(0, 0.1)
    return bn.eval()


class Model(nn.Module):
    def __init__(self, channels, expand):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn1 = _eval_bn(hidden)
        self.dw = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = _eval_bn(hidden)
        self.project = nn.Conv2d(hidden, channels, 1, bias=False)
        self.bn3 = _eval_bn(channels)

    def forward(self, x):
        y = F.relu6(self.bn1(self.expand(x)))
        y = F.relu6(self.bn2(self.dw(y)))
        return self.bn3(self.project(y)) + x


batch_size = 32
channels = 32
expand = 6
height = width = 56


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, expand]
