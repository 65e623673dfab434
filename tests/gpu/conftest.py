"""Fixtures of the GPU tests."""
import pytest
import torch


@pytest.fixture
def strict_fp32():
    """cuBLAS and cuDNN in strict fp32, as the judge compares: under cuDNN's default TF32 the reference and a file that
    runs the same convolution in another layout (channels-last, a folded batch norm) or at another batch may pick
    other algorithms and differ by TF32's rounding, about 1e-3."""
    was = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = was
