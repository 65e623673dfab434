"""Each whole-model problem (problems/models/) at a small size, compiled and run on the CPU emulator
against eager: the emitted file as a whole (held values, cat kernels, folds, row kernels, pools)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from emulator import GXX, emulated_model, force_conv_layout, launching, mismatch, write_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")

MODELS = sorted((Path(__file__).resolve().parents[1] / "problems" / "models").glob("*.py"))
# Module-level sizes, shrunk so the emulator runs each in seconds (windows and heads still divide them).
SMALL = {"batch_size": 2, "size": 14, "tokens": 16, "seq_len": 16, "dim": 48, "channels": 16, "width": 16,
         "in_channels": 8, "blocks": 2, "groups": 4, "growth": 4, "layers": 2, "widths": (8, 16)}


def _small(source: str) -> str:
    for name, value in SMALL.items():
        source = re.sub(rf"^{name} = .*$", f"{name} = {value!r}", source, flags=re.M)
    return source


def _no_general_path(*args):
    raise AssertionError("the inputs took the general path: the kernels did not run")


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_matches_eager_on_the_emulator(tmp_path, path):
    small = write_problem(tmp_path, path.stem, _small(path.read_text()))
    new_cls, result = emulated_model(small, tmp_path)
    namespace: dict = {}
    exec(small.read_text(), namespace)
    torch.manual_seed(0)
    ref = namespace["Model"](*namespace["get_init_inputs"]())
    new = new_cls(*namespace["get_init_inputs"]())
    new.load_state_dict(ref.state_dict())
    new.train(ref.training)
    new._tw_general = _no_general_path
    force_conv_layout(new, False)
    inputs = namespace["get_inputs"]()
    with torch.no_grad():
        want, got = ref(*[t.clone() for t in inputs]), new(*[t.clone() for t in inputs])
    assert not (m := mismatch(got, want, 1e-4)), m
    launched = new_cls.forward.__globals__["_LIB"].launched
    assert len(launched) == len(result.plan.kernels)
    assert set(launched) == launching(result.plan)
