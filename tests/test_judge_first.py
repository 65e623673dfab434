"""judge/first.py, the check `torchweld compile` runs on a GPU: it grades with the judge's table (CPU tensors)."""
import ast
from pathlib import Path

import pytest
import torch

from torchweld.judge import first
from torchweld.judge.tolerance import TABLE, TF32, compare_tensor

FIRST = Path(first.__file__)


def test_first_has_no_tolerance_table_of_its_own():
    assert not hasattr(first, "TOLERANCE")
    tree = ast.parse(FIRST.read_text())
    numbers = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, float)
               and 0 < n.value < 0.1]
    assert numbers == [], f"first.py holds tolerance-like numbers: {numbers}"


@pytest.mark.parametrize("dtype", list(TABLE))
def test_first_grades_each_dtype_as_the_judges_table(dtype):
    tol = TABLE[dtype]
    ref = torch.ones(8, dtype=dtype)
    verdicts = set()
    for k in (0.5, 0.9, 1.1, 2.0):
        out = (ref.double() * (1 + k * (tol.atol + tol.rtol))).to(dtype)
        off = float((out.double() - ref.double()).abs().max())
        ok, max_abs, _, why = first.compare(out, ref)
        assert ok == (off <= tol.atol + tol.rtol) == compare_tensor(out, ref, mode="table")["ok"], (k, off, why)
        assert max_abs == pytest.approx(off)
        verdicts.add(ok)
    assert verdicts == {True, False}


def test_the_values_the_two_tables_disagreed_on_are_the_judges():
    # bf16: 4 ulps at 1.0 (0.031) passed the judge's row but not the first check's old 1e-2 one
    ref = torch.ones(4, dtype=torch.bfloat16)
    assert first.compare(ref + 0.03125, ref)[0]
    # fp64: 5e-8 passed the first check's old 1e-7 row but not the judge's 1e-8 one
    ref64 = torch.ones(4, dtype=torch.float64)
    assert not first.compare(ref64 + 5e-8, ref64)[0]


def test_an_override_replaces_one_row():
    ref = torch.ones(4)
    out = ref + 5e-4
    assert not first.compare(out, ref)[0]
    assert first.compare(out, ref, {torch.float32: TF32})[0]
    assert first.compare(out, ref, {torch.float32: 1e-3})[0]  # a bare number is atol and rtol
    half = torch.ones(4, dtype=torch.float16)
    assert not first.compare(half + 0.03, half, {torch.float32: 1.0})[0]  # the fp16 row is untouched


def test_mismatches_fail_with_a_reason():
    ref = torch.ones(4)
    for out, words in ((torch.ones(5), "shape"), (torch.ones(4, dtype=torch.float64), "dtype"),
                       ((1, 2), "tuple"), (torch.tensor([1.0, float("nan"), 1.0, 1.0]), "NaN")):
        ok, max_abs, rel, why = first.compare(out, ref)
        assert not ok and words in why, (out, why)
    ok, *_ = first.compare(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]))
    assert ok  # NaN where the reference has it
