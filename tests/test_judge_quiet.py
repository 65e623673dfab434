"""judge/quiet.py: the judge that times pauses the other registered judges, and only them."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def test_unset_is_a_no_op(monkeypatch):
    monkeypatch.delenv(quiet.ENV, raising=False)
    assert quiet.register() is None
    with quiet.quiet() as paused:
        assert paused == []
