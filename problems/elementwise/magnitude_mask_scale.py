"""Magnitude masking: a comparison mask |x| > threshold cast to float and multiplied back, then rescaled."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, threshold, scale):
        super().__init__()
        self.threshold = threshold
        self.scale = scale

    def forward(self, x):
        mask = (x.abs() > self.threshold).to(x.dtype)
        return x * mask * self.scale


dim0 = 17
dim1 = 999
dim2 = 61
threshold = 0.5
scale = 1.6


def get_inputs():
    return [torch.randn(dim0, dim1, dim2)]


def get_init_inputs():
    return [threshold, scale]
