"""The judge's trusted child run through every stage on the CPU (CheckOptions.device "cpu"), in this
process, with the candidate in its own process: the plumbing between child.py, the stage files
(correctness, generalisation, timing) and the candidate's process, buffers and the other mode included.
The GPU suite proves the checks themselves."""
import json

import torch

from torchweld.judge import child
from torchweld.judge.check_options import CheckOptions

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


def fp32_flags():
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision())


def judge(tmp_path, tail="", **opts) -> dict:
    (tmp_path / "problem.py").write_text(PROBLEM)
    (tmp_path / "candidate.py").write_text(CANDIDATE.replace("{tail}", tail))
    o = CheckOptions(timing_runs=3, timing_min_s=0.001, timing_max_runs=5, timing_sets=2, fresh_sets=2,
                     max_variants=4, device="cpu", timeout_s=120, **opts)
    return child.judge([str(tmp_path / "problem.py"), str(tmp_path / "candidate.py"), o.to_json(),
                        str(tmp_path / "result.json")], key=b"k")


def test_an_honest_candidate_goes_through_every_stage(tmp_path):
    before = fp32_flags()
    r = judge(tmp_path)
    assert r["outcome"] == "correct", (r["message"], r["details"])
    assert r["device"] == "cpu" and r["precision"].startswith("strict fp32")
    assert list(r["stage_s"]) == ["start", "build", "weights", "correctness", "generalization", "timing"]
    assert len(r["correctness"]) == 5 and all(c["ok"] for c in r["correctness"])
    labels = [g["inputs"] for g in r["generalization"]]
    assert labels[0].startswith("training mode, then") and "batch=1" in labels  # the other mode, then variants
    assert r["buffers"] and all(b["ok"] for b in r["buffers"])
    t = r["timing"]
    assert t["eager_ms"] > 0 and t["candidate_ms"] > 0 and t["compile_ms"] is None
    assert t["runs"] >= 3 and t["judges_paused"] == 0 and t["fresh_ms"] > 0 and t["seen_ms"] > 0
    assert r["cheats"] == []
    assert fp32_flags() == before  # the switch restored what it set
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["result"]["outcome"] == "correct" and saved["sig"] == child.sign(b"k", saved["result"])


def test_a_wrong_candidate_stops_at_its_first_trial(tmp_path):
    r = judge(tmp_path, tail=" + 0.1")
    assert r["outcome"] == "wrong" and r["message"].startswith("wrong output on trial 1")
    assert r["stage"] == "correctness" and r["timing"] is None


def test_the_lock_is_taken_before_the_gpu_stages(tmp_path):
    r = judge(tmp_path, gpu_lock=str(tmp_path / "gpu.lock"), timing=False)
    assert r["outcome"] == "correct"
    assert list(r["stage_s"]) == ["start", "build", "weights", "waiting for the GPU", "correctness",
                                  "generalization"]


def test_a_crash_in_the_candidates_process_is_a_runtime_error_of_that_stage(tmp_path):
    r = judge(tmp_path, tail="\n\n\nimport ctypes\nModelNew.forward = lambda self, x: ctypes.string_at(0)",
              timing=False)
    assert r["outcome"] == "runtime_error" and r["stage"] == "correctness"
    assert r["message"] == "the candidate's process died of SIGSEGV during correctness", r["message"]
