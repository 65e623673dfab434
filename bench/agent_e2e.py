"""`torchweld agent` end to end on a GPU, against the test suite's replay server (issue 15).

    python3 bench/agent_e2e.py SEEDS_DIR OUT_DIR [--rounds N] [--per-gpu K]

SEEDS_DIR holds the recorded replies (../shared/seeds: 000_*.txt ...; they stay out of the repository). The
server on 127.0.0.1 answers each conversation's first request with that seed problem's recorded reply; a later
request gets seed 002's mended reply (tests/fixtures/judge/seed002_mended.py) for seed 002 and the same reply
again for the others (the loop judges repeated code once). The real judge grades every answer. Writes
OUT_DIR/trajectory.jsonl, OUT_DIR/summary.txt and the best answers, as the agent does. The device machine's image
has no `openai` (session 8's call stopped there): run bench/agent_wheels.sh here first and carry .whl.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import agent_replay  # noqa: E402
from agent_replay import Replay, ReplayServer, reply  # noqa: E402

from torchweld.agent.agent_cli import main as agent_main  # noqa: E402

PROBLEMS = {"000": "seed000_convt3d_bias_residual.py", "001": "seed001_conv2d_relu_bias.py",
            "002": "seed002_convt3d.py", "004": "seed004_convt2d_bias_clamp_scale.py"}
MENDED = (ROOT / "tests" / "fixtures" / "judge" / "seed002_mended.py").read_text()


def route(body: dict):
    """The recorded reply for the seed problem this conversation is about."""
    first = body["messages"][1]["content"]
    seed = next(s for s, f in PROBLEMS.items() if (ROOT / "problems" / "seeds" / f).read_text().strip() in first)
    if seed == "002" and len(body["messages"]) > 2:
        return reply("The binding needs a declaration before use.\n```python\n" + MENDED + "```\n")
    return reply(agent_replay.seed_reply(seed))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("seeds", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-gpu", type=int, default=4)
    args = ap.parse_args()
    agent_replay.SEEDS = args.seeds
    missing = [s for s in PROBLEMS if not agent_replay.seed_reply(s)]
    if missing:
        raise SystemExit(f"no recorded reply for seed(s) {missing} under {args.seeds}")
    with ReplayServer(Replay(route=route)) as url:
        return agent_main([*(str(ROOT / "problems" / "seeds" / f) for f in PROBLEMS.values()),
                           "--base-url", url, "--model", "replay", "--rounds", str(args.rounds),
                           "--per-gpu", str(args.per_gpu), "--concurrency", "4", "--out", str(args.out)])


if __name__ == "__main__":
    sys.exit(main())
