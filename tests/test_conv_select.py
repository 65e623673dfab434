"""runtime/conv_select.py, the per-site choice pasted into emitted files: ours only where it runs and
matches cuDNN within the judge's tolerance, then the fastest of ours, cuDNN as given and cuDNN
channels-last; the weight packed once per version; channels-last input without a copy where it is."""
from __future__ import annotations

import warnings

import pytest
import torch

from torchweld.runtime.conv_select import (_tw_channels_last, _tw_conv_lib, _tw_conv_mismatch, _tw_conv_packed,
                                           _tw_convk, _tw_convk_decide)

X = torch.randn(2, 4, 5, 5)


def _ways(ours_out, lib_out):
    calls = []

    def ours():
        calls.append("ours")
        return ours_out

    def library(fmt):
        calls.append(fmt)
        return lib_out
    return ours, library, calls


def test_ours_kept_where_it_matches_and_is_fastest():
    out = (torch.ones(3),)
    ours, library, _ = _ways(out, out)
    way, why = _tw_convk_decide("k", ours, library, (X,), lambda calls: [2.0, 3.0, 1.0])
    assert way == "ours" and "ours 1 ms" in why


def test_fastest_cudnn_layout_kept_otherwise():
    out = (torch.ones(3),)
    ours, library, _ = _ways(out, out)
    way, _ = _tw_convk_decide("k", ours, library, (X,), lambda calls: [2.0, 1.0, 3.0])
    assert way == torch.channels_last


def test_a_mismatch_warns_and_keeps_cudnn(strict_fp32):
    ours, library, _ = _ways((torch.ones(3) * 1.01,), (torch.ones(3),))
    with pytest.warns(RuntimeWarning, match="does not match cuDNN"):
        way, why = _tw_convk_decide("k", ours, library, (X,), lambda calls: [1.0] * len(calls))
    assert way is None and "ours not run" in why


def test_no_path_keeps_cudnn_silently():
    ours, library, _ = _ways(None, (torch.ones(3),))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        way, why = _tw_convk_decide("k", ours, library, (torch.randn(2, 4, 5),), lambda calls: [1.0] * len(calls))
    assert way is None and "no convolution path" in why  # a 1-d input: one cuDNN layout only


@pytest.fixture
def strict_fp32():
    was = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # as the judge's fp32 mode sets it
    yield
    torch.backends.cudnn.allow_tf32 = was


def test_tolerance_is_the_judges(strict_fp32):
    ref = torch.ones(4)
    assert _tw_conv_mismatch((ref + 5e-5,), (ref,)) == ""
    assert "1 of 4" in _tw_conv_mismatch((ref + torch.tensor([0, 0, 0, 1e-3]),), (ref,))
    torch.backends.cudnn.allow_tf32 = True  # cuDNN may use TF32: the judge's TF32 tolerance
    assert _tw_conv_mismatch((ref + torch.tensor([0, 0, 0, 1e-3]),), (ref,)) == ""
    assert _tw_conv_mismatch((ref.half() + 5e-3,), (ref.half(),)) == ""
    assert "float16" in _tw_conv_mismatch((ref.half(),), (ref,))


def test_off_cuda_the_library_runs_as_given():
    class M(torch.nn.Module):
        pass
    m, seen = M(), []
    out = _tw_convk(m, "k", lambda mod, x: seen.append("ours"), lambda mod, fmt, x: seen.append(fmt) or (x,), X)
    assert out[0] is X and seen == [None] and m._tw_convk_picks[("k", -1)][0] is None


def test_weight_packed_once_per_version_and_channels_last_without_copy():
    m = torch.nn.Module()
    w = torch.randn(6, 2, 3, 3)
    a = _tw_conv_packed(m, "k", w, 2, False)
    assert _tw_conv_packed(m, "k", w, 2, False) is a
    w.add_(1.0)
    b = _tw_conv_packed(m, "k", w, 2, False)
    assert b is not a and torch.equal(b, w.reshape(6, 2, 9).transpose(1, 2).contiguous())
    cl = X.contiguous(memory_format=torch.channels_last)
    assert _tw_channels_last(cl) is cl and _tw_channels_last(X).stride() == cl.stride()
    y = _tw_conv_lib(m, "k", torch.channels_last, X, torch.randn(3, 4, 3, 3), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert y.is_contiguous(memory_format=torch.channels_last)
