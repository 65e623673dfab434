"""The judge's child process run through every stage on the CPU: CUDA faked where the stages touch it, a
deterministic clock for the timing stage. What it proves is the plumbing between child.py and the stage
files (correctness, generalisation, timing); the GPU suite proves the checks themselves."""
from types import SimpleNamespace

import pytest
import torch

from torchweld.judge import child, guards
from torchweld.judge.check_options import CheckOptions
from torchweld.runtime import site_timing as runtime_timing

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.rand(2, 3, 8, 8)]


def get_init_inputs():
    return [3, 4, 3]
'''

CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x))){tail}
'''


class StepClock:
    """The judge's clocks on a clock that only events move: every recorded event is half a millisecond
    after the previous one, so each timed call takes exactly that and wall time equals event time."""

    def __init__(self):
        self.now = 0.0

    def changed(self):
        return []

    def event(self):
        return {}

    def record(self, ev):
        self.now += 0.5
        ev["t"] = self.now

    def elapsed_time(self, s, e):
        return e["t"] - s["t"]

    def synchronize(self):
        pass

    def perf_counter(self):
        return self.now / 1e3


@pytest.fixture
def fake_gpu(monkeypatch):
    zeros = torch.zeros
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "FakeGPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch, "zeros", lambda *a, device=None, **k: zeros(*a, **k))
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: model)
    monkeypatch.setattr(guards, "RealClocks", StepClock)
    monkeypatch.setattr(guards, "poison_free_memory", lambda plant=None: 0)
    monkeypatch.setattr(guards, "cuda_kernels", lambda fn: (fn(), [])[1])
    monkeypatch.setattr(runtime_timing, "torch", SimpleNamespace(
        int32=torch.int32, empty=lambda n, dtype=None, device=None: torch.empty(n, dtype=dtype),
        cuda=SimpleNamespace(get_device_properties=lambda d: SimpleNamespace(L2_cache_size=4096))))


def fp32_flags():
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision())


def judge(tmp_path, tail="", **opts) -> dict:
    (tmp_path / "problem.py").write_text(PROBLEM)
    (tmp_path / "candidate.py").write_text(CANDIDATE.replace("{tail}", tail))
    o = CheckOptions(timing_runs=3, timing_min_s=0.001, timing_max_runs=5, timing_sets=2, fresh_sets=2,
                     max_variants=4, **opts)
    return child.judge([str(tmp_path / "problem.py"), str(tmp_path / "candidate.py"), o.to_json(),
                        str(tmp_path / "result.json")])


def test_an_honest_candidate_goes_through_every_stage(fake_gpu, tmp_path):
    before = fp32_flags()
    r = judge(tmp_path)
    assert r["outcome"] == "correct", (r["message"], r["details"])
    assert r["device"] == "FakeGPU" and r["precision"].startswith("strict fp32")
    assert list(r["stage_s"]) == ["start", "build", "weights", "torch.compile", "correctness", "generalization",
                                  "timing"]
    assert len(r["correctness"]) == 5 and all(c["ok"] for c in r["correctness"])
    labels = [g["inputs"] for g in r["generalization"]]
    assert labels[0].startswith("training mode, then") and "batch=1" in labels  # the other mode, then variants
    assert r["buffers"] and all(b["ok"] for b in r["buffers"])
    t = r["timing"]
    assert t["eager_ms"] == t["candidate_ms"] == t["compile_ms"] == 0.5 and t["speedup_vs_eager"] == 1.0
    assert t["runs"] == 3 and t["judges_paused"] == 0 and t["fresh_ms"] == t["seen_ms"] == 0.5
    assert r["cheats"] == []
    assert fp32_flags() == before  # the switch restored what it set
    assert (tmp_path / "result.json").is_file()


def test_a_wrong_candidate_stops_at_its_first_trial(fake_gpu, tmp_path):
    r = judge(tmp_path, tail=" + 0.1")
    assert r["outcome"] == "wrong" and r["message"].startswith("wrong output on trial 1")
    assert r["stage"] == "correctness" and r["timing"] is None


def test_the_lock_is_taken_before_the_gpu_stages(fake_gpu, tmp_path):
    r = judge(tmp_path, gpu_lock=str(tmp_path / "gpu.lock"), timing=False)
    assert r["outcome"] == "correct"
    assert list(r["stage_s"]) == ["start", "build", "weights", "waiting for the GPU", "correctness",
                                  "generalization"]
