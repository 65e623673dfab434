"""On a GPU: torchweld.compile on modules defined here (an MLP, a conv block, a transformer block)
runs its kernels (never the original forward) and matches eager, sharing the original's weights."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchweld

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.usefixtures("strict_fp32")]


class MLP(nn.Module):
    def __init__(self, d=512, h=2048):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class ConvBlock(nn.Module):
    def __init__(self, c=64):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)) + x)


class TransformerBlock(nn.Module):
    def __init__(self, d=256, heads=8):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.mlp(self.ln2(x))


CASES = [(MLP, (64, 512)), (ConvBlock, (8, 64, 32, 32)), (TransformerBlock, (4, 128, 256))]


@pytest.mark.parametrize("cls,shape", CASES, ids=[c.__name__ for c, _ in CASES])
def test_compiled_module_runs_kernels_and_matches_eager(cls, shape, tmp_path):
    torch.manual_seed(0)
    m = cls().cuda().eval()
    x = torch.randn(shape, device="cuda")
    new = torchweld.compile(m, x, cache_dir=tmp_path)
    assert new.torchweld.fallbacks == ()
    assert all(a is b for a, b in zip(m.parameters(), new.parameters()))
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(shape, device="cuda")
            assert torch.allclose(new(x), m(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cls,shape", CASES[:2], ids=[c.__name__ for c, _ in CASES[:2]])
def test_other_batch_sizes_run_the_kernels(cls, shape, tmp_path):
    """The batch reaches only pointwise kernels, a GEMM or a convolution: one compile serves batch 1 and 3x."""
    torch.manual_seed(0)
    m = cls().cuda().eval()
    new = torchweld.compile(m, torch.randn(shape, device="cuda"), cache_dir=tmp_path)
    assert "Runtime dims: the batch" in new.torchweld.source
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    with torch.no_grad():
        for batch in (1, 3 * shape[0]):
            x = torch.randn((batch, *shape[1:]), device="cuda")
            assert torch.allclose(new(x), m(x), atol=1e-4, rtol=1e-4), batch


def test_other_sequence_lengths_run_the_kernels(tmp_path):
    """The transformer block computes each token on its own outside sdpa, which attends within each sample:
    one compile serves other batch sizes and sequence lengths, its kernels running at each."""
    torch.manual_seed(0)
    m = TransformerBlock().cuda().eval()
    new = torchweld.compile(m, torch.randn(4, 128, 256, device="cuda"), cache_dir=tmp_path)
    assert "Runtime dims: the batch and the sequence length" in new.torchweld.source
    new.__dict__["_tw_general"] = None  # NOTE: a call that fell back to the original forward fails here
    with torch.no_grad():
        for batch, seq in ((4, 1), (4, 77), (1, 512), (9, 128)):
            x = torch.randn((batch, seq, 256), device="cuda")
            assert torch.allclose(new(x), m(x), atol=1e-4, rtol=1e-4), (batch, seq)
