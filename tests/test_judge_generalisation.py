"""Generalisation variants: which shapes and constructor arguments the judge tries."""
import importlib.util
from pathlib import Path

import torch

from torchweld.judge.generalisation import Variant, all_variants, init_variants, reshape_inputs, shape_variants

ROOT = Path(__file__).parent.parent


def _problem(rel):
    spec = importlib.util.spec_from_file_location("p", ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_seed002_gets_stride_and_padding_variants():
    p = _problem("problems/seeds/seed002_convt3d.py")
    labels = [v.label for v in init_variants(p.Model, p.get_init_inputs())]
    assert labels[:5] == ["kernel_size=5", "stride=2", "padding=1", "output_padding=1", "groups=2"]
    v = next(v for v in init_variants(p.Model, p.get_init_inputs()) if v.label == "stride=2")
    assert v.init_args[3] == 2 and v.init_args[0] == 48


def test_defaults_not_passed_become_keywords():
    class M(torch.nn.Module):
        def __init__(self, c, k, stride=1, padding=(0, 0)):
            super().__init__()

    vs = init_variants(M, [3, 3])
    stride = next(v for v in vs if v.label == "stride=2")
    assert stride.init_args == (3, 3) and stride.init_kwargs == {"stride": 2}
    pad = next(v for v in vs if v.label.startswith("padding="))
    assert pad.init_kwargs == {"padding": (1, 1)}


def test_shape_variants_for_4d_inputs():
    x = torch.rand(16, 3, 32, 32)
    labels = [v.label for v in shape_variants([x], [])]
    assert labels == ["batch=1", "batch=3", "spatial=24x24", "spatial=17x17"]


def test_no_shape_variants_for_a_vector():
    assert shape_variants([torch.rand(5)], []) == []


def test_reshape_keeps_dtype_and_value_range():
    x = torch.rand(8, 4, 32, 32)
    out = reshape_inputs([x, 2.0], Variant("v", spatial=(17, 17)), torch.Generator().manual_seed(0))
    assert out[0].shape == (8, 4, 17, 17) and out[0].dtype == x.dtype and out[1] == 2.0
    assert 0 <= float(out[0].min()) and float(out[0].max()) < 1
    b = reshape_inputs([x], Variant("b", batch=3), torch.Generator().manual_seed(0))
    assert b[0].shape == (3, 4, 32, 32)
    capped = reshape_inputs([x], Variant("i"), torch.Generator().manual_seed(0), max_batch=2)
    assert capped[0].shape == (2, 4, 32, 32)


def test_limit():
    p = _problem("problems/seeds/seed000_convt3d_bias_residual.py")
    assert len(all_variants(p.Model, p.get_inputs(), p.get_init_inputs(), 5)) == 5


def test_mode_variant_only_where_a_norm_keeps_running_statistics():
    from torch import nn

    from torchweld.judge.generalisation import mode_variant

    assert mode_variant(nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4))) is None
    assert mode_variant(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))) is True  # fresh: training
    evaluated = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    evaluated[1].eval()
    assert mode_variant(evaluated) is False
    assert mode_variant(nn.Sequential(nn.BatchNorm1d(4), nn.Dropout(0.1)).eval()) is None  # training is random
    assert mode_variant(nn.Sequential(nn.BatchNorm1d(4, track_running_stats=False))) is None


def test_compare_buffers_catches_a_wrong_running_statistic():
    from torch import nn

    from torchweld.judge.correctness import compare_buffers

    ref, cand = nn.BatchNorm1d(5), nn.BatchNorm1d(5)
    x = torch.randn(8, 5)
    ref(x), cand(x)
    ok = compare_buffers(ref, cand, "after 1 call")
    assert ok["ok"] and ok["compared"] == 3
    cand.running_var.mul_(1.001)  # a biased instead of unbiased variance is off by n/(n-1): far more
    bad = compare_buffers(ref, cand, "after 1 call")
    assert not bad["ok"] and "running_var" in bad["why"]
    cand.running_var.copy_(ref.running_var)
    cand.num_batches_tracked += 1
    assert not compare_buffers(ref, cand, "after 1 call")["ok"]
    assert compare_buffers(nn.Linear(2, 2), nn.Linear(2, 2), "x") is None
