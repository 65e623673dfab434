"""Rendering a saved judge result, and the CLI's usage errors (no GPU needed)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchweld.judge import EXIT_CODES, CheckOptions, check
from torchweld.judge.check_cli import main
from torchweld.judge.render import render

FIX = Path(__file__).parent / "fixtures" / "judge"
ROOT = Path(__file__).parent.parent


def test_render_saved_result():
    text = render(json.loads((FIX / "result_sample.json").read_text()))
    first = text.splitlines()[0]
    assert first.startswith("CHEAT  problem_relu_bias: caught by output_reuse")
    for want in ("trial 2 (seed 2)", "batch=3", "FAIL", "[[0, 0, 0, 5]]", "output_reuse", "CAUGHT", "other_stream",
                 "0.3770", "1.09x", "H100", "strict fp32", "never-seen inputs 0.3810 ms"):
        assert want in text, want
    assert "\x1b[" not in text  # plain text unless asked for colour


def test_render_minimal_result():
    text = render({"outcome": "no_build", "name": "p", "message": "extension x failed to build: main.cpp:6: error"})
    assert text.startswith("NO_BUILD  p: extension x failed to build")


def test_exit_codes():
    assert EXIT_CODES == {"correct": 0, "wrong": 12, "cheat": 13, "no_build": 10, "runtime_error": 11, "timeout": 14,
                          "no_gpu": 15, "decoy_kernel": 16, "no_kernel": 17}


def test_cli_missing_problem_exits_2(capsys):
    assert main(["check", "/nonexistent/problem.py", str(FIX / "honest_relu_bias.py")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "torchweld check: /nonexistent/problem.py: no such file"


def test_cli_missing_candidate_exits_2(capsys):
    assert main(["check", str(FIX / "problem_relu_bias.py"), "/nonexistent/reply.md"]) == 2
    assert capsys.readouterr().err.strip().endswith("/nonexistent/reply.md: no such file")


def test_cli_broken_problem_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module): pass\n")
    assert main(["check", str(bad), str(FIX / "honest_relu_bias.py")]) == 2
    assert "missing get_inputs, get_init_inputs" in capsys.readouterr().err


def test_cli_bad_arguments():
    with pytest.raises(SystemExit) as e:
        main(["check", "a.py"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main(["check", "a.py", "b.py", "--tolerance", "loose"])


def test_reply_without_code_is_no_build_json(tmp_path):
    reply = tmp_path / "reply.md"
    reply.write_text("I cannot help with that.\n")
    proc = subprocess.run([sys.executable, "-m", "torchweld.judge.check_cli", "check", str(FIX / "problem_relu_bias.py"),
                           str(reply), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 10
    res = json.loads(proc.stdout)
    assert res["outcome"] == "no_build" and "no fenced python block" in res["message"]
    assert res["name"] == "problem_relu_bias" and res["cheats"] == [] and res["timing"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_no_gpu_is_its_own_outcome_not_a_runtime_error(tmp_path):
    cand = tmp_path / "plain.py"
    cand.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    res = check(FIX / "problem_relu_bias.py", cand, CheckOptions(timeout_s=120))
    assert res["outcome"] == "no_gpu" and res["message"].endswith("not run: no GPU")
    assert res["static"] == [] and res["torch"] == torch.__version__


def test_timeout_kills_the_child():
    res = check(FIX / "problem_relu_bias.py", FIX / "honest_relu_bias.py", CheckOptions(timeout_s=0.2))
    assert res["outcome"] == "timeout" and "no result within 0.2 s" in res["message"]


def test_child_crash_is_reported(tmp_path):
    cand = tmp_path / "crash.py"
    cand.write_text("import os\nos.abort()\nclass ModelNew: pass\n")
    res = check(FIX / "problem_relu_bias.py", cand, CheckOptions(timeout_s=120))
    if torch.cuda.is_available():
        assert res["outcome"] == "runtime_error" and "SIGABRT" in res["message"] and "build" in res["message"]
    else:
        assert res["outcome"] == "runtime_error"
