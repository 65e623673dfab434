"""A narrowing stack of three nn.Linear layers (1024 -> 512 -> 128 -> 32) with ReLU, ReLU and tanh."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.fc1 = nn.Linear(widths[0], widths[1])
        self.fc2 = nn.Linear(widths[1], widths[2])
        self.fc3 = nn.Linear(widths[2], widths[3])

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return torch.tanh(self.fc3(x))


batch_size = 4096
widths = (1024, 512, 128, 32)


def get_inputs():
    return [torch.randn(batch_size, widths[0])]


def get_init_inputs():
    return [widths]
