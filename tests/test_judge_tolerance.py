"""Tolerance tables and the float64-oracle comparison, on CPU tensors."""
import math

import pytest
import torch

from torchweld.judge.tolerance import compare, downgrade_level, table_tol


@pytest.fixture
def case():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, dtype=torch.float64, generator=g)
    b = torch.randn(64, 64, dtype=torch.float64, generator=g)
    truth = a @ b
    ref = (a.float() @ b.float())  # the fp32 reference and its own rounding error
    return truth, ref


def test_exact_copy_passes(case):
    truth, ref = case
    v = compare(ref.clone(), ref, truth)
    assert v["ok"] and v["max_abs"] == 0 and v["rel"] == 0 and v["first_bad"] == []
    assert v["oracle"]["ref_rel"] > 0


def test_other_summation_order_passes(case):
    truth, ref = case
    a_rev = (truth.float().double() + 0)  # truth rounded to fp32: better than the reference
    assert compare(a_rev.float(), ref, truth)["ok"]


def test_single_bad_element_reported(case):
    truth, ref = case
    out = ref.clone()
    out[3, 7] += 0.5
    v = compare(out, ref, truth)
    assert not v["ok"] and v["first_bad"] == [[3, 7]] and v["n_bad"] == 1
    assert v["max_abs"] == pytest.approx(0.5, rel=1e-6)


def test_first_bad_is_capped_at_five(case):
    truth, ref = case
    out = ref + 1.0
    v = compare(out, ref, truth)
    assert len(v["first_bad"]) == 5 and v["first_bad"][0] == [0, 0] and v["first_bad"][1] == [0, 1]


def test_nan_where_reference_has_none_always_fails(case):
    truth, ref = case
    out = ref.clone()
    out[0, 0] = math.nan
    for mode in ("oracle", "table", "kernelbench"):
        v = compare(out, ref, truth, mode=mode)
        assert not v["ok"] and "NaN" in v["why"] and v["first_bad"][0] == [0, 0]


def test_matching_nan_and_inf_pass():
    ref = torch.tensor([1.0, math.nan, math.inf, -math.inf])
    assert compare(ref.clone(), ref, mode="table")["ok"]
    assert not compare(torch.tensor([1.0, math.nan, -math.inf, math.inf]), ref, mode="table")["ok"]


def test_all_zeros_on_near_zero_output():
    g = torch.Generator().manual_seed(1)
    truth = torch.rand(1000, dtype=torch.float64, generator=g) * 1e-3
    ref = truth.float()
    zeros = torch.zeros_like(ref)
    assert compare(zeros, ref, truth, mode="kernelbench")["ok"]  # the weakness of one loose atol
    v = compare(zeros, ref, truth, mode="oracle")
    assert not v["ok"] and v["oracle"]["cand_rel"] == pytest.approx(1.0)
    assert not compare(zeros, ref, mode="table")["ok"]


def test_oracle_catches_fp16_level_error_that_table_passes(case):
    truth, ref = case
    out = truth.half().float()  # an fp16 result, cast back
    assert compare(out, ref, truth, mode="kernelbench")["ok"]
    assert not compare(out, ref, truth, mode="oracle")["ok"]


def test_oracle_falls_back_to_table_without_truth(case):
    _, ref = case
    assert compare(ref + 5e-5, ref, None, mode="oracle")["ok"]
    assert not compare(ref + 1e-2, ref, None, mode="oracle")["ok"]


def test_shape_and_dtype_mismatch():
    r = torch.zeros(2, 3)
    assert "shape" in compare(torch.zeros(3, 2), r)["why"]
    assert "dtype" in compare(torch.zeros(2, 3, dtype=torch.float16), r)["why"]


def test_integer_outputs_need_exact_match():
    r = torch.tensor([1, 2, 3])
    assert compare(r.clone(), r)["ok"]
    v = compare(torch.tensor([1, 2, 4]), r)
    assert not v["ok"] and v["first_bad"] == [[2]]


def test_tuple_outputs():
    r = (torch.ones(2), torch.zeros(3))
    assert compare((torch.ones(2), torch.zeros(3)), r, mode="table")["ok"]
    v = compare((torch.ones(2), torch.ones(3)), r, mode="table")
    assert not v["ok"] and v["first_bad"][0] == [1, 0]
    assert "3 outputs, reference has 2" in compare((torch.ones(2),) * 2 + (torch.ones(1),), r)["why"]


def test_tables():
    assert table_tol(torch.float32, "table").atol == 1e-4
    assert table_tol(torch.float16, "kernelbench").rtol == 1e-2
    assert table_tol(torch.bfloat16, "oracle").atol == 2e-2


def test_downgrade_level():
    assert downgrade_level(3e-4, {"float16": 2e-4, "bfloat16": 2e-3}) == "float16"
    assert downgrade_level(3e-3, {"float16": 2e-4, "bfloat16": 2e-3}) == "bfloat16"
    assert downgrade_level(0.5, {"float16": 2e-4, "bfloat16": 2e-3}) is None
