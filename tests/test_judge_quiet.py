"""judge/quiet.py: the judge that times pauses the other registered judges, and only them; the directory they
register in comes with the judge's options."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from torchweld.judge import quiet

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")

# A stand-in judge: its own session (as `check` starts judges), registered, then spinning.
JUDGE = """
import sys, time
from torchweld.judge import quiet
quiet.register(sys.argv[1])
print("registered", flush=True)
while True:
    time.sleep(0.01)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: str) -> str:
    for _ in range(200):
        if _state(pid) == want:
            break
        time.sleep(0.01)
    return _state(pid)


@pytest.fixture
def judges(tmp_path):
    procs = []

    def start(n: int):
        for _ in range(n):
            p = subprocess.Popen([sys.executable, "-c", JUDGE, str(tmp_path)], stdout=subprocess.PIPE,
                                 start_new_session=True)
            assert p.stdout.readline().strip() == b"registered"
            procs.append(p)
        return procs

    yield start
    for p in procs:
        quiet.judge_ended(p.pid, tmp_path)
        p.kill()
        p.wait()


def test_the_others_are_stopped_inside_and_running_after(judges, tmp_path):
    a, b = judges(2)
    with quiet.quiet(tmp_path) as paused:
        assert sorted(paused) == sorted([a.pid, b.pid])
        assert _wait_state(a.pid, "T") == "T" and _wait_state(b.pid, "T") == "T"
    assert _wait_state(a.pid, "S") != "T" and _wait_state(b.pid, "S") != "T"


def test_a_reused_pid_is_not_stopped(judges, tmp_path):
    (a,) = judges(1)
    (tmp_path / str(a.pid)).write_bytes(b"some other program\0")  # the pid now runs something else
    with quiet.quiet(tmp_path) as paused:
        assert paused == [] and _state(a.pid) != "T"


def test_judge_ended_resumes_a_pause_its_judge_never_undid(judges, tmp_path):
    a, b = judges(2)
    quiet._signal_groups([b.pid], quiet.signal.SIGSTOP)  # as if a's pause was cut short by a kill
    assert _wait_state(b.pid, "T") == "T"
    quiet.judge_ended(a.pid, tmp_path)
    assert not (tmp_path / str(a.pid)).exists()
    assert _wait_state(b.pid, "S") != "T"


def test_no_directory_is_a_no_op_whatever_the_environment_says(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHWELD_JUDGES_DIR", str(tmp_path))  # the old way: read no more
    assert quiet.register(None) is None
    with quiet.quiet(None) as paused:
        assert paused == []
    quiet.judge_ended(12345, None)
    assert list(tmp_path.iterdir()) == []


def test_the_judges_child_registers_in_its_options_directory_while_it_runs(tmp_path, monkeypatch):
    from torchweld.judge import child
    from torchweld.judge.check_options import CheckOptions

    entry = tmp_path / "judges" / str(os.getpgrp())
    during = []
    monkeypatch.setattr(child.Judging, "run", lambda self: during.append(entry.read_bytes()))
    opts = CheckOptions(judges_dir=str(tmp_path / "judges"))
    child.judge([str(tmp_path / "p.py"), str(tmp_path / "c.py"), opts.to_json(), str(tmp_path / "r.json")])
    assert during == [Path("/proc/self/cmdline").read_bytes()]
    assert not entry.exists()  # gone with the run


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path: the child ends at once")
def test_check_resumes_the_others_when_its_child_ends(judges, tmp_path):
    from torchweld.judge import CheckOptions, check

    (b,) = judges(1)
    quiet._signal_groups([b.pid], quiet.signal.SIGSTOP)  # as if paused by a judge that died while timing
    assert _wait_state(b.pid, "T") == "T"
    fix = Path(__file__).parent / "fixtures" / "judge"
    cand = tmp_path / "candidate" / "plain.py"  # nothing to build: without a GPU the child ends at once
    cand.parent.mkdir()
    cand.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n")
    res = check(fix / "problem_relu_bias.py", cand, CheckOptions(timeout_s=120, judges_dir=str(tmp_path)))
    assert res["outcome"] == "no_gpu"
    assert _wait_state(b.pid, "S") != "T"


def test_the_package_check_stays_the_function_after_every_judge_module_is_imported():
    """`torchweld.judge.check` is the API's function, not a submodule that shadows it once imported."""
    import importlib
    import pkgutil

    import torchweld.judge as judge

    for mod in pkgutil.iter_modules(judge.__path__):
        importlib.import_module(f"torchweld.judge.{mod.name}")
    assert callable(judge.check) and judge.check.__module__ == "torchweld.judge.parent"
