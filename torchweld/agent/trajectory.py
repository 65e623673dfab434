"""The trajectory: one JSON object per line, appended as each step completes, read back to resume.

Events: `reply` (a model's answer, written before it is judged, so a resumed run judges it without asking
again), `round` (the whole round: prompt, reply, extracted code, verdict, timings, tokens, feedback) and
`error` (a request that failed for good; the round is asked again on resume). A conversation is named by
a key over what decides its content: the problem's source, the model, the start mode, the prompts, and
the sample number. A line cut short by an interruption is skipped when read.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from torchweld.agent.client import Redactor


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def conversation_key(problem_source: str, model: str, start: str, prompts: str, sample: int) -> str:
    return sha("\x00".join((problem_source, model, start, prompts, str(sample))))


class Writer:
    """Appends events to the trajectory file; thread-safe; every line flushed and synced when written."""

    def __init__(self, path: Path, redact: Redactor):
        self.path, self.redact = path, redact
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._mend_last_line()

    def _mend_last_line(self):
        """A run killed mid-write leaves a partial last line: end it, so the next event starts a line."""
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    with open(self.path, "ab") as g:
                        g.write(b"\n")

    def write(self, event: dict):
        line = json.dumps(self.redact.data(event), ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def read(path: Path) -> list[dict]:
    """Every complete event in the file, in order."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by an interruption
        if isinstance(event, dict) and "event" in event:
            out.append(event)
    return out


@dataclass
class History:
    """What a conversation already has: its complete rounds 1..n in order, and a reply awaiting its verdict."""

    rounds: list[dict] = field(default_factory=list)
    pending: dict | None = None  # the `reply` event of round n+1, if one was written


def histories(events: list[dict]) -> dict[str, History]:
    """Per conversation key: the rounds that continue one another from round 1, and a pending reply."""
    by_key: dict[str, dict[int, dict]] = {}
    replies: dict[str, dict[int, dict]] = {}
    for e in events:
        key, n = e.get("key"), e.get("round")
        if not isinstance(key, str) or not isinstance(n, int):
            continue
        if e["event"] == "round":
            by_key.setdefault(key, {})[n] = e
        elif e["event"] == "reply":
            replies.setdefault(key, {})[n] = e
    out = {}
    for key in set(by_key) | set(replies):
        rounds, n = [], 1
        while n in by_key.get(key, {}):
            rounds.append(by_key[key][n])
            n += 1
        out[key] = History(rounds, replies.get(key, {}).get(n))
    return out


def judged(events: list[dict]) -> dict[str, dict]:
    """Judge results by (problem source, code) hash, from earlier rounds: the same code is not judged twice."""
    out = {}
    for e in events:
        if e.get("event") == "round" and e.get("judge_key") and isinstance(e.get("result"), dict):
            out[e["judge_key"]] = e["result"]
    return out
