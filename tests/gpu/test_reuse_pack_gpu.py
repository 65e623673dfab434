"""On a GPU: files whose GEMMs read packed weights (gemm_pack.py) and whose kernels write over the
GEMM's result (emit.reusable) match eager on fresh inputs, again after load_state_dict and after an
in-place update of the weights (each packs again), and return tensors of their own."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchweld.judge.first import compare, fp32_mode
from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = [ROOT / "problems" / f"{stem}.py" for stem in (
    "matmul/linear_gelu_tanh", "matmul/mlp_gelu_two_linears", "lowp/linear_gelu_tanh_bf16", "lowp/linear_swiglu_bf16")]


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_packed_and_reused_match_eager(path, tmp_path):
    problem = load_problem(path)
    result = compile_problem(problem)
    assert "= _tw_pack(self, " in result.source and "each element before it is written" in result.source
    out = tmp_path / f"{path.stem}_new.py"
    out.write_text(result.source)
    module = load_module(out, out.read_text(), prefix="tw_gpu_pack")
    ref = problem.build_model(0).cuda()
    new = module.ModelNew(*problem.init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())

    def check(tag, seed):
        torch.manual_seed(seed)
        x = [t.cuda() for t in problem.inputs()]
        with torch.no_grad():
            got = new(*x)
            ok, max_abs, rel, why = compare(got, ref(*x))
        assert ok, f"{tag}: {why}"
        held = {t.data_ptr() for t in [*x, *new.parameters(), *new.buffers()]}
        assert got.data_ptr() not in held, f"{tag}: the output aliases an input or a parameter"

    with fp32_mode(False):
        for trial in range(3):
            check("fresh inputs", 5000 + trial)
        packs = new._tw_packs
        assert packs and all(p.is_contiguous() for _, _, p in packs.values())
        for (_, w, p) in packs.values():
            assert torch.equal(p, w.t())
        fresh = problem.build_model(1).cuda()
        for m in (ref, new):
            m.load_state_dict(fresh.state_dict())
        check("after load_state_dict", 6000)
        with torch.no_grad():
            for m in (ref, new):
                for name, p in m.named_parameters():
                    if name.endswith("weight"):
                        p.mul_(-0.5)
        check("after an in-place update", 6001)
