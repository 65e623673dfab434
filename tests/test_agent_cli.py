"""`torchweld agent` as a process: exit codes, one-line errors, Ctrl-C and resume, the key never written anywhere."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the agent's client needs the openai package: pip install 'torchweld[agent]'")

from agent_replay import Replay, ReplayServer, error, free_port, reply  # noqa: E402
from torchweld.agent.judging import JudgePool, Slot, SubprocessJudge, make_slots  # noqa: E402
from torchweld.agent.trajectory import read  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "agent_driver.py"
PROBLEM = ROOT / "tests" / "fixtures" / "judge" / "problem_relu_bias.py"
KEY = "sk-tw-planted-5f1c0ffee9d8a7b6"
CODE = "```python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    pass  # {}\n```\n"


def agent(args, judge="correct", env=None, timeout=60):
    return subprocess.run([sys.executable, str(DRIVER), judge, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_refused_connection_is_one_line_and_an_exit_code(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    p = agent([PROBLEM, "--base-url", url, "--model", "m", "--out", tmp_path])
    assert p.returncode == 4
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "cannot connect" in err[0] and "refused" in err[0].lower() and url in err[0]
    assert "Traceback" not in p.stdout + p.stderr


def test_usage_errors(tmp_path):
    p = agent([PROBLEM, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--rounds", "0"])
    assert p.returncode == 2 and "--rounds must be at least 1" in p.stderr
    p = agent([tmp_path / "nope.py", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
    assert p.returncode == 2 and "nope.py" in p.stderr and "Traceback" not in p.stderr
    p = agent([PROBLEM, "--base-url", "localhost:8000", "--model", "m"])
    assert p.returncode == 2 and "not an http(s) URL" in p.stderr


def test_the_key_appears_in_no_output_and_no_file(tmp_path):
    out = tmp_path / "out"
    # a model and an endpoint that echo the key back: in a reply, in its code, in error messages
    state = Replay(script=[reply(f"Using key {KEY}.\n" + CODE.format(KEY)),
                           error(429, f"rate limited for {KEY}", headers=(("Retry-After", "0"),)),
                           reply(CODE.format("second")),
                           error(401, f"Incorrect API key provided: {KEY}")])
    with ReplayServer(state) as url:
        p = agent([PROBLEM, "--base-url", url, "--model", "m", "--out", out, "--rounds", "3", "--api-key-env",
                   "TW_TEST_KEY"], env={"TW_TEST_KEY": KEY})
    assert p.returncode == 4 and "refused the key (HTTP 401)" in p.stderr and "TW_TEST_KEY" in p.stderr
    assert all({k.lower(): v for k, v in h.items()}["authorization"] == f"Bearer {KEY}" for h in state.headers)
    files = [f for f in out.rglob("*") if f.is_file()]
    assert {f.name for f in files} >= {"trajectory.jsonl", "summary.txt", "problem_relu_bias_new.py"}
    for text in [p.stdout, p.stderr] + [f.read_text(errors="replace") for f in files]:
        assert KEY not in text
    assert "[api key]" in (out / "problem_relu_bias_new.py").read_text()  # the echoed key, redacted


def test_the_real_judge_runs_without_the_key_in_its_environment(monkeypatch):
    monkeypatch.setenv("TW_TEST_KEY", KEY)
    monkeypatch.setenv("TW_SAME_VALUE", KEY)
    env = SubprocessJudge(hide_env=("TW_TEST_KEY",)).child_env({"CUDA_VISIBLE_DEVICES": "3"})
    assert KEY not in env.values() and "TW_TEST_KEY" not in env and env["CUDA_VISIBLE_DEVICES"] == "3"


def test_slots_pin_judges_as_the_bench_does(tmp_path):
    slots = make_slots(["0", "1"], 2, tmp_path)
    assert [s.gpu for s in slots] == ["0", "0", "1", "1"]
    assert slots[2].env() == {"CUDA_VISIBLE_DEVICES": "1"}  # NOTE: the judge's options travel as options
    assert slots[2].options() == {"gpu_lock": str(tmp_path / "gpu1.lock"), "judges_dir": str(tmp_path / "judges")}
    assert (tmp_path / "judges").is_dir() and make_slots(["0"], 1, tmp_path)[0].options() == {}
    assert make_slots([], 1, tmp_path) == [Slot(None)] and Slot(None).env() == {}
    assert make_slots(["0"], 1, tmp_path)[0].env() == {"CUDA_VISIBLE_DEVICES": "0"}


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks what the judge says on a CPU machine")
def test_the_real_judge_through_its_child_process_on_a_cpu_machine(tmp_path):
    cand = tmp_path / "c.py"
    cand.write_text("class ModelNew:\n    pass\n")
    pool = JudgePool(SubprocessJudge(limit_s=240), [Slot(None, None)], 300)
    result = pool(PROBLEM, cand)
    assert result["outcome"] == "no_gpu" and result["message"].endswith("not run: no GPU")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a CPU machine")
def test_no_gpu_with_the_real_judge_is_one_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "torchweld", "agent", str(PROBLEM), "--base-url",
                        "http://127.0.0.1:9/v1", "--model", "m", "--out", str(tmp_path)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no CUDA GPU visible" in p.stderr


def test_ctrl_c_leaves_a_resumable_state(tmp_path):
    out = tmp_path / "out"
    args = [PROBLEM, "--base-url", None, "--model", "m", "--out", out, "--rounds", "1"]
    state = Replay(script=[reply(CODE.format("only"))])
    with ReplayServer(state) as url:
        args[2] = url
        proc = subprocess.Popen([sys.executable, str(DRIVER), "slow", *map(str, args)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(e["event"] == "reply" for e in read(out / "trajectory.jsonl")):
                time.sleep(0.1)
            time.sleep(0.5)  # in the judge now
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130 and "interrupted" in stderr and "again to resume" in stderr
    assert "Traceback" not in stderr
    assert [e["event"] for e in read(out / "trajectory.jsonl")] == ["reply"]
    # the rerun judges the saved reply without asking the endpoint again
    state = Replay(script=[])
    with ReplayServer(state) as url:
        args[2] = url
        p = agent(args, judge="correct")
    assert p.returncode == 0 and state.requests == []
    rounds = [e for e in read(out / "trajectory.jsonl") if e["event"] == "round"]
    assert len(rounds) == 1 and rounds[0]["outcome"] == "correct" and "# only" in rounds[0]["code"]
    assert json.loads((out / "trajectory.jsonl").read_text().splitlines()[0])["event"] == "reply"
