"""UNet decoder block: 2x ConvTranspose2d upsampling, concatenated with the encoder skip, then two 3x3 conv + BN + ReLU at inference."""
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
        self.up = nn.ConvTranspose2d(in_channels, out_channels, 2, stride=2)
        self.conv1 = nn.Conv2d(2 * out_channels, out_channels, 3, padding=1, bias=False)
        self.bn1 = _eval_bn(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = _eval_bn(out_channels)

    def forward(self, x, skip):
        y = torch.cat([self.up(x), skip], dim=1)
        y = torch.relu(self.bn1(self.conv1(y)))
        return torch.relu(self.bn2(self.conv2(y)))


batch_size = 16
in_channels = 256
out_channels = 128
height = width = 32


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    skip = torch.randn(batch_size, out_channels, 2 * height, 2 * width)
    return [x, skip]


def get_init_inputs():
    return [in_channels, out_channels]
