"""Run `torchweld agent` in a process of its own with a fake judge (tests: Ctrl-C, what reaches stdout/stderr).

Usage: python tests/agent_driver.py JUDGE [CLI ARGS ...]; JUDGE is `correct` (at once) or `slow` (sleeps up
to 30 s, then answers correct; the test interrupts it first).
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchweld.agent.agent_cli import main  # noqa: E402


def correct(problem, candidate, slot):
    return {"outcome": "correct", "message": "correct on 5 trials", "correctness": [{"inputs": "trial 1", "ok": True}],
            "generalization": [], "cheats": [], "static": [], "details": [],
            "timing": {"eager_ms": 2.0, "compile_ms": 1.5, "candidate_ms": 1.0, "speedup_vs_eager": 2.0,
                       "speedup_vs_compile": 1.5}}


def slow(problem, candidate, slot):
    time.sleep(30)
    return correct(problem, candidate, slot)


if __name__ == "__main__":
    judge = {"correct": correct, "slow": slow}[sys.argv[1]]
    sys.exit(main(sys.argv[2:], judge=judge, client_overrides={"backoff_s": 0.01}))
