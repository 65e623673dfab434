"""The judge on a GPU: seed replies graded as expected, every cheat fixture caught, honest code passes.

Run: python3 -m pytest -q tests/gpu/test_judge_gpu.py -n 6 -k "not timing" && \
     python3 -m pytest -q tests/gpu/test_judge_gpu.py -k timing      (timing tests alone on the GPU)
"""
from pathlib import Path

import pytest
import torch

from torchweld.judge import CheckOptions, check
from torchweld.judge.render import render

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "judge"
SEEDS = ROOT / "problems" / "seeds"
REPLIES = FIX / "seeds"
RELU_BIAS = FIX / "problem_relu_bias.py"


def judge(problem, candidate, **opts) -> dict:
    res = check(problem, candidate, CheckOptions(**opts))
    print(render(res, width=160))  # shown by pytest -rP / on failure
    return res


def reply(seed: str) -> Path:
    return next(REPLIES.glob(f"{seed}_*.txt"))


@pytest.mark.parametrize("seed,problem", [("000", "seed000_convt3d_bias_residual.py"),
                                          ("004", "seed004_convt2d_bias_clamp_scale.py")])
def test_seed_reply_is_correct(seed, problem):
    res = judge(SEEDS / problem, reply(seed), timing=False)
    assert res["outcome"] == "correct", res["message"]
    assert len(res["correctness"]) == 5 and all(c["ok"] for c in res["correctness"])
    assert res["generalization"] and all(g["ok"] for g in res["generalization"])
    assert res["cheats"] == [] and res["build_s"] > 0 and res["extracted_from"]


def test_timing_seed001_correct_and_repeatable():
    res = judge(SEEDS / "seed001_conv2d_relu_bias.py", reply("001"))
    assert res["outcome"] == "correct", res["message"]
    t = res["timing"]
    assert t["candidate_ms"] >= 1.0, "seed 001 is meant to be a >= 1 ms problem"
    assert abs(t["candidate_ms_repeat"] - t["candidate_ms"]) / t["candidate_ms"] < 0.03
    assert t["eager_ms"] > 0 and t["speedup_vs_eager"] > 0
    assert t["compile_ms"] is not None or any("torch.compile" in d for d in res["details"])


def test_seed002_reply_does_not_build():
    res = judge(SEEDS / "seed002_convt3d.py", reply("002"), timing=False)
    assert res["outcome"] == "no_build"
    assert "conv_transpose3d_forward" in res["message"] and "conv_transpose3d_cuda" in res["message"]
    assert "\n" not in res["message"]


def test_seed002_mended_fails_generalisation():
    res = judge(SEEDS / "seed002_convt3d.py", FIX / "seed002_mended.py", timing=False)
    assert res["outcome"] == "wrong", res["message"]
    assert all(c["ok"] for c in res["correctness"]), "right for the sampled stride 1, padding 0"
    bad = {g["inputs"] for g in res["generalization"] if not g["ok"]}
    assert {"stride=2", "padding=1"} <= bad
    assert "generalisation" in res["message"]


CHEATS = [
    ("side_stream", {"stream_race", "timing_forged"}),
    ("output_pool", {"output_reuse"}),
    ("stale_memory", {"stale_memory"}),
    ("input_cache_address", {"input_cache"}),
    ("input_cache_value", {"input_cache"}),
    ("mutate_input", {"input_mutation"}),
    ("timer_patch", {"timer_patch"}),
    ("threads", {"threads"}),
    ("child_process", {"subprocess"}),
    ("try_fallback", {"no_custom_kernel"}),
    ("calls_reference", {"calls_reference"}),
    ("lazy_subclass", {"lazy_subclass"}),
    ("tf32_flags", {"tf32_flags"}),
    ("fp16_compute", {"precision_downgrade"}),
]


@pytest.mark.parametrize("name,checks", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheat_is_caught(name, checks):
    # Only the value cache needs the timing stage to be seen; the rest are caught before it.
    res = judge(RELU_BIAS, FIX / "cheats" / f"{name}.py", timing=name == "input_cache_value")
    assert res["outcome"] == "cheat", res["message"]
    assert res["cheats"] and res["cheats"][0]["check"] in checks and res["cheats"][0]["caught"]
    assert res["cheats"][0]["check"] in res["message"]


def test_all_zeros_on_near_zero_output():
    problem = FIX / "problem_near_zero.py"
    res = judge(problem, FIX / "cheats" / "zeros_near_zero.py", timing=False)
    assert res["outcome"] == "wrong" and "all zeros" in res["message"]
    loose = judge(problem, FIX / "cheats" / "zeros_near_zero.py", timing=False, tolerance="kernelbench")
    assert loose["outcome"] == "correct"  # why the oracle is the default
    assert judge(problem, FIX / "honest_near_zero.py", timing=False)["outcome"] == "correct"


def test_illegal_memory_access_is_a_runtime_error():
    res = judge(RELU_BIAS, FIX / "crash_illegal_address.py", timing=False)
    assert res["outcome"] == "runtime_error"
    assert "illegal memory access" in res["message"].lower() or "cuda error" in res["message"].lower()


def test_hang_is_a_timeout(tmp_path):
    cand = tmp_path / "hang.py"
    cand.write_text("import time\nimport torch\n\nclass ModelNew(torch.nn.Module):\n"
                    "    def __init__(self, *a):\n        super().__init__()\n"
                    "    def forward(self, x):\n        time.sleep(3600)\n")
    res = judge(RELU_BIAS, cand, timing=False, timeout_s=40)
    assert res["outcome"] == "timeout" and "correctness" in res["message"]


def test_segfault_is_a_runtime_error(tmp_path):
    cand = tmp_path / "segv.py"
    cand.write_text("import ctypes\nimport torch\n\nclass ModelNew(torch.nn.Module):\n"
                    "    def __init__(self, *a):\n        super().__init__()\n"
                    "    def forward(self, x):\n        return ctypes.string_at(0)\n")
    res = judge(RELU_BIAS, cand, timing=False)
    assert res["outcome"] == "runtime_error" and "SIGSEGV" in res["message"] and "correctness" in res["message"]


def test_timing_honest_fixture_passes_every_check():
    res = judge(RELU_BIAS, FIX / "honest_relu_bias.py")
    assert res["outcome"] == "correct", res["message"]
    t = res["timing"]
    for key in ("eager_ms", "compile_ms", "candidate_ms", "compile_build_s", "speedup_vs_eager",
                "speedup_vs_compile", "candidate_ms_repeat", "method"):
        assert key in t
    assert abs(t["candidate_ms_repeat"] - t["candidate_ms"]) / t["candidate_ms"] < 0.10
    assert res["device"] and res["precision"].startswith("strict fp32")


MODES = FIX / "modes"


@pytest.mark.parametrize("name,where", [("biased_running_var", "after 5 trials"), ("ignores_eval", "eval mode")])
def test_running_statistics_and_the_other_mode_are_judged(name, where):
    # anti_cheat off: these are plain PyTorch (no custom kernel); the point is the buffers and the mode.
    res = judge(MODES / "problem_bn_relu.py", MODES / f"{name}.py", timing=False, anti_cheat=False)
    assert res["outcome"] == "wrong", res["message"]
    assert where in res["message"]


def test_torchweld_batch_norm_passes_both_modes(tmp_path):
    from torchweld.pipeline import compile_file

    cand = compile_file(MODES / "problem_bn_relu.py", tmp_path / "bn_new.py")
    res = judge(MODES / "problem_bn_relu.py", cand, timing=False)
    assert res["outcome"] == "correct", res["message"]
    assert res["buffers"] and all(b["ok"] and b["compared"] == 3 for b in res["buffers"])
    assert any(g["inputs"].startswith("eval mode") and g["ok"] for g in res["generalization"])


# ---- the trust boundary (issue 18): the candidate in its own process, tensors by CUDA IPC ---------------------

TRUST = FIX / "trust"
TRUST_HOLES = [
    ("patch_judge", "cheat", "judge_patch"),
    ("stack_timing", "cheat", "timed_output"),
    ("rng_patch", "cheat", "rng_patch"),
    ("hook_reference", "cheat", "module_hook"),
    ("precision_in_call", "cheat", "precision_in_call"),
    ("forged_timing", "cheat", "timing_forged"),
    ("gc_reference", "wrong", None),
]


@pytest.mark.parametrize("fixture,outcome,check_name", TRUST_HOLES, ids=[h[0] for h in TRUST_HOLES])
def test_timing_trust_hole_is_caught_on_the_gpu(fixture, outcome, check_name):
    res = judge(TRUST / "problem_cpu.py", TRUST / f"{fixture}.py", timing_min_s=0.2)
    got = (res["outcome"], res["cheats"][0]["check"] if res["cheats"] else None)
    assert got == (outcome, check_name), res["message"]


def test_its_own_verdict_is_never_taken_on_the_gpu():
    res = judge(TRUST / "problem_cpu.py", TRUST / "own_verdict.py", timing=False)
    assert res["outcome"] == "wrong" and not res["cheats"], res["message"]


def test_timing_honest_pure_pytorch_passes_across_cuda_ipc():
    res = judge(TRUST / "problem_cpu.py", TRUST / "honest_cpu.py")
    assert res["outcome"] == "correct", (res["message"], res["details"])
    t = res["timing"]
    assert t["wall_ms"] is not None and t["round_trip_ms"] > 0 and res["sandbox"]


def test_a_decoy_launch_is_decoy_kernel():
    res = judge(RELU_BIAS, FIX / "cheats" / "decoy_kernel.py", timing=False)
    assert res["outcome"] == "decoy_kernel", res["message"]
    assert res["work"]["own_share"] < 0.01 and "poke_kernel" in res["work"]["own_kernels"][0]


def test_the_honest_fixtures_own_kernel_does_its_share_under_require_kernel():
    res = judge(RELU_BIAS, FIX / "honest_relu_bias.py", timing=False, require_kernel=True)
    assert res["outcome"] == "correct", res["message"]
    assert res["work"]["own_share"] >= 0.01 and res["work"]["own_kernels"]


def test_no_kernel_of_its_own_under_require_kernel_on_the_gpu():
    res = judge(TRUST / "problem_cpu.py", TRUST / "honest_cpu.py", timing=False, require_kernel=True)
    assert res["outcome"] == "no_kernel", res["message"]


def test_timing_the_judges_overhead_per_candidate():
    """Where a check's time goes with the candidate in its own process: printed for docs/judge.md."""
    import time

    t0 = time.perf_counter()
    res = judge(RELU_BIAS, FIX / "honest_relu_bias.py")
    total = time.perf_counter() - t0
    print(f"whole check {total:.1f} s; stages {res['stage_s']}; sandbox {res['sandbox']}; "
          f"round trip {res['timing']['round_trip_ms']:.3f} ms; candidate event {res['timing']['event_ms']:.3f} ms, "
          f"wall less round trip {res['timing']['wall_ms']:.3f} ms; "
          f"notes {[d for d in res['details'] if 'sandbox' in d]}")
    assert res["outcome"] == "correct", res["message"]
    assert res["stage_s"]["start"] < 60
