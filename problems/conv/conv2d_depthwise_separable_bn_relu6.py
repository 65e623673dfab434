"""MobileNet depthwise-separable block at inference: depthwise 3x3 + BN + ReLU6, then pointwise 1x1 + BN + ReLU6."""
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
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, 3, padding=1, groups=in_channels, bias=False)
        self.bn1 = _eval_bn(in_channels)
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.bn2 = _eval_bn(out_channels)

    def forward(self, x):
        x = F.relu6(self.bn1(self.depthwise(x)))
        return F.relu6(self.bn2(self.pointwise(x)))


batch_size = 32
in_channels = 128
out_channels = 256
height = width = 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
