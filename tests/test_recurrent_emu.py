"""The recurrent problems' emitted files run on the CPU emulator (tests/emulator.py) against eager:
cuDNN's recurrent op called as `torch.lstm` / `torch.gru` / `torch.rnn_*` (ATen's CPU kernel here),
and each unrolled step's kernel printed once and launched once per step. No GPU needed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from emulator import GXX, emulated_model, launching, mismatch

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

ROOT = Path(__file__).resolve().parents[1]
RECURRENT = sorted((ROOT / "problems" / "recurrent").glob("*.py"))


def _no_general_path(*args):
    raise AssertionError("took the original forward")


@pytest.mark.parametrize("path", RECURRENT, ids=lambda p: p.stem)
def test_problem_on_the_emulator(path, tmp_path):
    new_cls, result = emulated_model(path, tmp_path)
    ns: dict = {}
    exec(path.read_text(), ns)
    torch.manual_seed(0)
    ref = ns["Model"](*ns["get_init_inputs"]())
    torch.manual_seed(0)
    new = new_cls(*ns["get_init_inputs"]())
    new.load_state_dict(ref.state_dict())
    new._tw_general = _no_general_path
    torch.manual_seed(1)
    inputs = ns["get_inputs"]()
    with torch.no_grad():
        want = ref(*[t.clone() for t in inputs])
        got = new(*[t.clone() for t in inputs])
    bad = mismatch(got, want, 1e-4)
    assert not bad, bad
    # each kernel launched once per call; a step repeating another's code launches that one's
    launched = sys.modules[new_cls.__module__]._LIB.launched
    assert len(launched) == len(result.plan.kernels)
    assert set(launched) == launching(result.plan)
