"""MobileNet downsampling block: depthwise 3x3 stride-2 Conv2d, BatchNorm2d in eval mode, then ReLU6."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels, stride):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 3, stride=stride, padding=1, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.bn.weight.data.uniform_(0.5, 1.5)
        self.bn.bias.data.normal_(0, 0.1)
        self.bn.running_mean.normal_(0, 0.1)
        self.bn.running_var.uniform_(0.5, 2.0)
        self.bn.eval()

    def forward(self, x):
        return F.relu6(self.bn(self.dw(x)))


batch_size = 32
channels = 96
height = width = 112
stride = 2


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, stride]
