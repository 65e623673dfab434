"""Classifier head: Linear to 1000 classes, then log_softmax over the classes."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return F.log_softmax(self.fc(x), dim=1)


batch_size = 256
in_features = 2048
num_classes = 1000


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, num_classes]
