"""The loop: for each problem and sample, rounds of prompt -> reply -> judge -> feedback, many in flight at once.

Every step is in the trajectory as soon as it is done, so a run stopped anywhere (Ctrl-C, a crash, an endpoint
that went away) is resumed by running the same command again: finished rounds are read back, a reply that was
not yet judged is judged without asking the model again, and the same code is never judged twice.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from torchweld.agent import feedback, prompt
from torchweld.agent.client import ChatClient, EndpointError, Redactor, Reply, RequestFailed
from torchweld.agent.judging import JUDGE_ERROR
from torchweld.agent.trajectory import History, Writer, conversation_key, histories, judged, read, sha
from torchweld.judge.extract import CandidateError, extract_source, fenced_blocks

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")


@dataclass(frozen=True)
class AgentOptions:
    problems: tuple[Path, ...]
    out: Path = Path("out/agent")
    rounds: int = 3
    samples: int = 1
    concurrency: int = 4
    start: str = "blank"  # blank | compiled
    check: object = None  # the judge's CheckOptions (its defaults when None); part of the judged-code key


@dataclass
class Conversation:
    problem: object  # torchweld.problem.Problem
    sample: int
    key: str
    history: History
    first: str = ""  # the opening prompt (read back from round 1 when resumed)


@dataclass
class RunState:
    """Shared by the conversation threads: the stop flag, a fatal endpoint error, the best per problem."""

    stop: threading.Event = field(default_factory=threading.Event)
    fatal: str | None = None
    best: dict = field(default_factory=dict)  # problem name -> (speedup, round event)
    cache: dict = field(default_factory=dict)  # judge key -> result
    lock: threading.Lock = field(default_factory=threading.Lock)
    rounds_done: int = 0


def unclosed_at(text: str) -> int | None:
    """The 1-based line of the first code line of a fenced block that is never closed, else None."""
    open_fence, start = None, None
    for i, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if not m:
            continue
        fence = m.group(1)
        if open_fence is None:
            open_fence, start = fence, i + 1
        elif fence[0] == open_fence[0] and len(fence) >= len(open_fence) and not line.strip()[len(fence):].strip():
            open_fence = None
    return start if open_fence is not None else None


def examine(reply: Reply) -> tuple[str | None, str | None, str]:
    """(code or None, the agent's own outcome or None, its feedback) for a reply, before any judging."""
    try:
        code, block, _ = extract_source(reply.text)
    except CandidateError:
        blocks = fenced_blocks(reply.text)
        if reply.finish_reason == "length" or unclosed_at(reply.text) is not None:
            return None, "truncated", feedback.truncated(blocks[-1].code if blocks else "", reply.finish_reason)
        py = sum(b.lang in ("", "python", "py", "python3") for b in blocks)
        return None, "no_code", feedback.no_code(reply.text, len(blocks), py)
    if unclosed_at(reply.text) == block.line:
        return code, "truncated", feedback.truncated(code, reply.finish_reason)
    return code, None, ""


class Agent:
    """One run: `run()` returns when every conversation is done, the endpoint failed, or `state.stop` is set."""

    def __init__(self, opts: AgentOptions, client: ChatClient, judge: Callable[[Path, Path], dict], console,
                 model: str, redact: Redactor | None = None):
        self.opts, self.client, self.judge, self.console, self.model = opts, client, judge, console, model
        self.redact = redact or Redactor(None)
        self.out = opts.out
        self.trajectory = self.out / "trajectory.jsonl"
        self.writer = Writer(self.trajectory, self.redact)
        self.state = RunState()
        self.keys: set[str] = set()
        self.check_key = json.dumps(asdict(opts.check), sort_keys=True) if opts.check is not None else ""

    # ---- setup ------------------------------------------------------------------------------
    def conversations(self, problems: list) -> list[Conversation]:
        events = read(self.trajectory)
        hist = histories(events)
        self.state.cache = judged(events)
        convs, version = [], prompt.prompt_version()
        for k in range(1, self.opts.samples + 1):
            for p in problems:
                key = conversation_key(p.source, self.model, self.opts.start, version, k)
                convs.append(Conversation(p, k, key, hist.get(key, History())))
        for c in convs:
            for r in c.history.rounds:
                self._consider(c, r)
        return convs

    def opening(self, convs: list[Conversation]):
        """The first prompt of each conversation: read back, or made (compiling each problem once for
        --start compiled, here in one thread: tracing is not thread-safe)."""
        starts: dict[str, prompt.Start] = {}
        for c in convs:
            if c.history.rounds:
                c.first = c.history.rounds[0]["prompt"]
                continue
            if c.problem.name not in starts:
                starts[c.problem.name] = (prompt.compiled_start(c.problem) if self.opts.start == "compiled"
                                          else prompt.Start())
            c.first = prompt.first_prompt(c.problem.source, starts[c.problem.name])

    # ---- the run ----------------------------------------------------------------------------
    def run(self, problems: list) -> RunState:
        convs = self.conversations(problems)
        self.keys = {c.key for c in convs}
        todo = [c for c in convs if len(c.history.rounds) < self.opts.rounds]
        self.opening(todo)
        queue = list(todo)
        lock = threading.Lock()

        def worker():
            while not self.state.stop.is_set():
                with lock:
                    if not queue:
                        return
                    conv = queue.pop(0)
                try:
                    self.converse(conv)
                except EndpointError as e:
                    with self.state.lock:
                        self.state.fatal = self.state.fatal or self.redact.text(str(e))
                    self.state.stop.set()
                except Exception as e:  # noqa: BLE001 - one conversation's bug must not end the others
                    self.say(f"{conv.problem.name} s{conv.sample}: stopped: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=worker, daemon=True, name=f"agent {i}")
                   for i in range(max(1, min(self.opts.concurrency, len(todo) or 1)))]
        for t in threads:
            t.start()
        # NOTE: joined with a timeout, so Ctrl-C reaches this thread (the caller catches it).
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
        return self.state

    def converse(self, conv: Conversation):
        messages = prompt.messages_for(conv.first)
        for r in conv.history.rounds:
            messages += [{"role": "assistant", "content": r["reply"]}, {"role": "user", "content": r["feedback"]}]
        for n in range(len(conv.history.rounds) + 1, self.opts.rounds + 1):
            if self.state.stop.is_set():
                return
            event = self.one_round(conv, n, messages)
            if event is None:
                return
            messages += [{"role": "assistant", "content": event["reply"]},
                         {"role": "user", "content": event["feedback"]}]

    def one_round(self, conv: Conversation, n: int, messages: list[dict]) -> dict | None:
        t0, name = time.monotonic(), conv.problem.name
        base = {"key": conv.key, "problem": name, "problem_path": str(conv.problem.path),
                "problem_sha": sha(conv.problem.source), "sample": conv.sample, "round": n, "model": self.model,
                "start": self.opts.start}
        pending = conv.history.pending if conv.history.pending and conv.history.pending.get("round") == n else None
        if pending is not None:
            reply = Reply(pending["reply"], pending.get("finish_reason"), (pending.get("tokens") or {}).get("prompt"),
                          (pending.get("tokens") or {}).get("completion"), pending.get("request_s") or 0.0,
                          pending.get("attempts") or 0)
        else:
            try:
                reply = self.client.chat(messages)
            except RequestFailed as e:
                self.writer.write({"event": "error", **base, "message": str(e), "wall": time.time()})
                self.say(f"{name} s{conv.sample} r{n}: request failed: {self.redact.text(str(e))}")
                return None
            self.writer.write({"event": "reply", **base, "reply": reply.text, "finish_reason": reply.finish_reason,
                               "tokens": {"prompt": reply.prompt_tokens, "completion": reply.completion_tokens},
                               "request_s": round(reply.seconds, 3), "attempts": reply.attempts, "wall": time.time()})
        # NOTE: a model (or endpoint) that echoes the key must not get it written into a candidate file either.
        reply = replace(reply, text=self.redact.text(reply.text))
        code, own, text = examine(reply)
        result, judge_key, candidate, t_judge = None, None, None, time.monotonic()
        if own is None:
            candidate = self.out / "candidates" / name / f"s{conv.sample}_r{n}.py"
            candidate.parent.mkdir(parents=True, exist_ok=True)
            candidate.write_text(code)
            judge_key = sha("\x00".join((conv.problem.source, code, self.check_key)))
            result = self.state.cache.get(judge_key)
            if result is None:
                result = self.redact.data(self.judge(conv.problem.path, candidate))
            if self.state.stop.is_set() and self.state.fatal is None:
                return None  # interrupted while judging: the reply is saved, and resume judges it again
            own = JUDGE_ERROR if result.get("outcome") == JUDGE_ERROR else None
            text = feedback.judge_error(result.get("message", "")) if own else feedback.render(result, code)
            if not own:
                with self.state.lock:
                    self.state.cache[judge_key] = result
        outcome = own or result.get("outcome")
        timing = (result or {}).get("timing") or {}
        event = {"event": "round", **base, "prompt": messages[-1]["content"], "reply": reply.text,
                 "finish_reason": reply.finish_reason, "code": code, "code_sha": sha(code) if code else None,
                 "candidate": str(candidate) if candidate else None, "outcome": outcome,
                 "message": result.get("message", "") if result else text.splitlines()[0],
                 "speedup_vs_eager": timing.get("speedup_vs_eager"),
                 "speedup_vs_compile": timing.get("speedup_vs_compile"), "candidate_ms": timing.get("candidate_ms"),
                 "result": result, "judge_key": judge_key if outcome != JUDGE_ERROR else None, "feedback": text,
                 "tokens": {"prompt": reply.prompt_tokens, "completion": reply.completion_tokens},
                 "attempts": reply.attempts, "request_s": round(reply.seconds, 3),
                 "judge_s": round(time.monotonic() - t_judge, 3), "round_s": round(time.monotonic() - t0, 3),
                 "wall": time.time()}
        if n == 1:
            event["system"] = prompt.SYSTEM
        self.writer.write(event)
        self._consider(conv, event)
        with self.state.lock:
            self.state.rounds_done += 1
        sp = event["speedup_vs_eager"]
        self.say(f"{name} s{conv.sample} r{n}: {outcome}" + (f" {sp:.2f}x eager" if sp else "")
                 + (f" ({event['message'][:100]})" if outcome != "correct" and event["message"] else ""))
        return event

    def _consider(self, conv: Conversation, event: dict):
        """Keep the fastest correct code per problem in OUT/<problem>_new.py."""
        if event.get("outcome") != "correct" or not event.get("code"):
            return
        speed = event.get("speedup_vs_eager") or 0.0
        name = conv.problem.name
        with self.state.lock:
            best = self.state.best.get(name)
            if best is not None and best[0] >= speed:
                return
            self.state.best[name] = (speed, event)
            path = self.out / f"{name}_new.py"
            tmp = path.with_suffix(".tmp")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(self.redact.text(event["code"]))
            tmp.replace(path)

    def say(self, line: str):
        self.console.print(self.redact.text(line), markup=False, highlight=False, soft_wrap=True)
