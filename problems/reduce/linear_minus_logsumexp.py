"""Language-model head scores: Linear to 4000 classes, then log-probabilities as x - logsumexp(x) over the classes."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.proj = nn.Linear(in_features, num_classes)

    def forward(self, x):
        scores = self.proj(x)
        return scores - torch.logsumexp(scores, dim=-1, keepdim=True)


batch_size = 512
in_features = 1024
num_classes = 4000


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, num_classes]
