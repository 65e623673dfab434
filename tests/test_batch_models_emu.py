"""Each whole-model problem (problems/models/) at a small size takes its batch at run time: one emission
runs its kernels (never the original forward) at batch 1, the captured one and 3x it on the CPU emulator,
against eager (transformer blocks flatten (B, S, D) to (B*S, D) for their linears and unbind q, k, v from
a stack in front of the batch)."""
from __future__ import annotations

import pytest
import torch

from emulator import GXX, emulated_model, force_conv_layout, launching, mismatch, write_problem
from test_models_emu import MODELS, _no_general_path, _small

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not installed")


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_at_other_batch_sizes_on_the_emulator(tmp_path, path):
    small = write_problem(tmp_path, path.stem, _small(path.read_text()))
    new_cls, result = emulated_model(small, tmp_path)
    assert result.plan.guard.batch, "the batch stays specialised"
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
    captured = inputs[0].shape[0]
    launched = new_cls.forward.__globals__["_LIB"].launched
    for batch in (1, captured, 3 * captured):
        xs = [torch.cat([t] * 3)[:batch] if isinstance(t, torch.Tensor) else t for t in inputs]
        del launched[:]
        with torch.no_grad():
            want, got = ref(*[t.clone() for t in xs]), new(*[t.clone() for t in xs])
        assert not (m := mismatch(got, want, 1e-4)), (batch, m)
        assert set(launched) == launching(result.plan), batch
