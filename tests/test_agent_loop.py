"""The loop end to end against the replay server, with a recorded or fake judge (the real one needs a GPU)."""
import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the agent's client needs the openai package: pip install 'torchweld[agent]'")

from agent_replay import Replay, ReplayServer, error, reply, seed_reply  # noqa: E402
from torchweld.agent.agent_cli import main  # noqa: E402
from torchweld.agent.trajectory import read  # noqa: E402
from torchweld.judge.extract import extract_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
SEEDS = {s: ROOT / "problems" / "seeds" / f for s, f in (
    ("000", "seed000_convt3d_bias_residual.py"), ("001", "seed001_conv2d_relu_bias.py"),
    ("002", "seed002_convt3d.py"), ("004", "seed004_convt2d_bias_clamp_scale.py"))}
VERDICTS = json.loads((FIX / "agent" / "seed002_verdicts.json").read_text())
MENDED = (FIX / "judge" / "seed002_mended.py").read_text()
needs_seeds = pytest.mark.skipif(not seed_reply("002"), reason="../shared/seeds (the recorded replies) is not here")


def correct(speedup=1.5):
    return {"outcome": "correct", "message": "correct", "correctness": [{"inputs": "trial 1", "ok": True}],
            "generalization": [], "details": [], "static": [], "cheats": [],
            "timing": {"eager_ms": 1.0 * speedup, "compile_ms": 1.2, "candidate_ms": 1.0, "speedup_vs_eager": speedup,
                       "speedup_vs_compile": 1.2}}


def run(url, out, problems, *extra, judge, **kw):
    argv = [str(p) for p in problems] + ["--base-url", url, "--model", "replay", "--out", str(out), *extra]
    return main(argv, judge=judge, client_overrides={"backoff_s": 0.01, "timeout_s": 5.0}, **kw)


def rounds(out):
    return [e for e in read(out / "trajectory.jsonl") if e["event"] == "round"]


@needs_seeds
def test_seed002_build_failure_then_the_mended_reply_is_judged(tmp_path):
    seed = seed_reply("002")
    code002 = extract_source(seed)[0]
    judged = []

    def recorded(problem, candidate, slot):
        code = Path(candidate).read_text()
        judged.append(code)
        key = "seed002" if code == code002 else "seed002_mended" if code == MENDED else None
        return json.loads(json.dumps(VERDICTS[key])) if key else {"outcome": "runtime_error", "message": "unknown"}

    state = Replay(script=[reply(seed), reply("The binding needs a declaration.\n```python\n" + MENDED + "```\n")])
    with ReplayServer(state) as url:
        assert run(url, tmp_path, [SEEDS["002"]], "--rounds", "2", judge=recorded) == 0
    r1, r2 = rounds(tmp_path)
    assert r1["outcome"] == "no_build" and "conv_transpose3d_forward" in r1["feedback"]
    assert "main.cpp:6 is your line" in r1["feedback"] and r1["code"] == code002
    # the model's second turn saw its own reply and the feedback naming the function
    sent = state.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[2]["content"] == seed and sent[3]["content"] == r1["feedback"]
    assert r2["outcome"] == "wrong" and "stride=2: relative error 2.55" in r2["feedback"]
    assert judged == [code002, MENDED]
    assert r1["system"] and r1["prompt"].startswith("Write `ModelNew`") and "tokens" in r1 and r1["round_s"] >= 0
    assert not (tmp_path / "seed002_convt3d_new.py").exists()  # nothing correct, nothing kept
    assert "no build" in (tmp_path / "summary.txt").read_text()


@needs_seeds
def test_four_seeds_two_samples_concurrently_keep_the_fastest(tmp_path):
    speed = {"000": 1.2, "001": 1.06, "004": 1.5}
    codes = {extract_source(seed_reply(s))[0]: s for s in speed}
    lock, calls = threading.Lock(), []

    def judge(problem, candidate, slot):
        with lock:
            calls.append(problem.stem)
        code = Path(candidate).read_text()
        if code in codes:
            return correct(speed[codes[code]])
        return json.loads(json.dumps(VERDICTS["seed002"]))

    def route(body):  # the seed reply for the problem the conversation is about; round 2 slightly faster
        first = body["messages"][1]["content"]
        s = next(s for s, p in SEEDS.items() if p.read_text().strip() in first)
        return reply(seed_reply(s) + ("\n<!-- again -->" if len(body["messages"]) > 2 else ""))

    state = Replay(route=route)
    with ReplayServer(state) as url:
        assert run(url, tmp_path, list(SEEDS.values()), "--rounds", "2", "--samples", "2", "--concurrency", "4",
                   "--stream", judge=judge) == 0
    assert len(state.requests) == 16 and len(rounds(tmp_path)) == 16
    # the same code is judged once: round 2 repeats round 1's code, and samples repeat each other
    assert sorted(calls) == sorted(p.stem for p in SEEDS.values())
    for s, sp in speed.items():
        best = tmp_path / f"{SEEDS[s].stem}_new.py"
        assert best.read_text() == next(c for c, k in codes.items() if k == s)
    assert not (tmp_path / "seed002_convt3d_new.py").exists()
    assert "ok 1.50x" in (tmp_path / "summary.txt").read_text()


def test_judge_crash_and_hang_do_not_stop_the_loop(tmp_path):
    code = "```python\nclass ModelNew:\n    pass\n# v{}\n```"
    calls = []

    def judge(problem, candidate, slot):
        calls.append(candidate.name)
        if len(calls) == 1:
            raise RuntimeError("the judge fell over")
        if len(calls) == 2:
            time.sleep(3)  # longer than the limit below; the loop moves on
        return correct()

    state = Replay(script=[reply(code.format(k)) for k in range(3)])
    with ReplayServer(state) as url:
        t0 = time.monotonic()
        assert run(url, tmp_path, [FIX / "judge" / "problem_relu_bias.py"], "--rounds", "3", judge=judge,
                   judge_limit_s=1.0) == 0
        assert time.monotonic() - t0 < 30
    r = rounds(tmp_path)
    assert [e["outcome"] for e in r] == ["judge_error", "judge_error", "correct"]
    assert "fell over" in r[0]["message"] and "no result within 1 s" in r[1]["message"]
    assert "not caused by your code" in r[0]["feedback"]
    assert (tmp_path / "problem_relu_bias_new.py").exists()


def test_no_code_and_cut_off_replies_are_fed_back_unjudged(tmp_path):
    cut = "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return"
    state = Replay(script=[reply("Let me think about the fusion first."), reply(cut, finish="length")])

    def judge(problem, candidate, slot):
        raise AssertionError("nothing to judge")

    with ReplayServer(state) as url:
        assert run(url, tmp_path, [FIX / "judge" / "problem_relu_bias.py"], "--rounds", "2", judge=judge) == 0
    r1, r2 = rounds(tmp_path)
    assert r1["outcome"] == "no_code" and r1["code"] is None and "no fenced code block" in r1["feedback"]
    assert r2["outcome"] == "truncated" and "cut off" in r2["feedback"]
    assert state.requests[1]["messages"][-1]["content"] == r1["feedback"]


def test_failed_request_ends_the_conversation_and_resume_asks_again(tmp_path):
    problem = FIX / "judge" / "problem_relu_bias.py"
    state = Replay(script=[error(500, "down")] * 2)
    with ReplayServer(state) as url:
        assert run(url, tmp_path, [problem], "--retries", "1", judge=lambda *a: correct()) == 0
    events = [json.loads(ln) for ln in (tmp_path / "trajectory.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["error"] and "HTTP 500" in events[0]["message"]
    state = Replay(script=[reply("```python\nclass ModelNew:\n    pass\n```")])
    with ReplayServer(state) as url:
        assert run(url, tmp_path, [problem], "--rounds", "1", judge=lambda *a: correct()) == 0
    assert [e["outcome"] for e in rounds(tmp_path)] == ["correct"]


def test_resume_continues_where_it_stopped(tmp_path):
    problem = FIX / "judge" / "problem_relu_bias.py"
    answers = ["```python\nclass ModelNew:\n    pass\n# %d\n```" % k for k in range(3)]
    state = Replay(script=[reply(a) for a in answers[:2]])
    with ReplayServer(state) as url:
        assert run(url, tmp_path, [problem], "--rounds", "2", judge=lambda *a: correct()) == 0
    # a partial line, as a kill in the middle of a write leaves it
    with open(tmp_path / "trajectory.jsonl", "a") as f:
        f.write('{"event": "round", "key": "x", "rou')
    state = Replay(script=[reply(answers[2])])
    with ReplayServer(state) as url:
        assert run(url, tmp_path, [problem], "--rounds", "3", judge=lambda *a: correct(2.0)) == 0
    assert len(state.requests) == 1  # rounds 1 and 2 were read back, not asked again
    assert [m["role"] for m in state.requests[0]["messages"]] == ["system", "user", "assistant", "user",
                                                                   "assistant", "user"]
    assert [e["round"] for e in rounds(tmp_path)] == [1, 2, 3]
    # another model is another conversation
    state = Replay(script=[reply(answers[0])])
    with ReplayServer(state) as url:
        main([str(problem), "--base-url", url, "--model", "other", "--out", str(tmp_path), "--rounds", "1"],
             judge=lambda *a: correct(), client_overrides={"backoff_s": 0.01})
    assert len(state.requests) == 1


def test_endpoint_gone_stops_the_run_with_one_line(tmp_path, capsys):
    problem = FIX / "judge" / "problem_relu_bias.py"
    state = Replay(script=[error(404, "model not found")])
    with ReplayServer(state) as url:
        assert run(url, tmp_path, [problem], "--samples", "3", "--concurrency", "1", judge=lambda *a: correct()) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "404" in err[0] and "--base-url" in err[0]
    assert len(state.requests) == 1  # the other conversations were not started


def test_start_compiled_opens_with_our_model_new_and_its_plan(tmp_path):
    state = Replay(script=[reply("```python\nclass ModelNew:\n    pass\n```")])
    with ReplayServer(state) as url:
        assert run(url, tmp_path, [FIX / "judge" / "problem_relu_bias.py"], "--rounds", "1", "--start", "compiled",
                   judge=lambda *a: correct()) == 0
    first = state.requests[0]["messages"][1]["content"]
    assert "A compiler (torchweld) has already written a correct `ModelNew`" in first and "Beat it" in first
    assert "def forward(...):" in first and "# fused:" in first and "load_inline" in first
    assert rounds(tmp_path)[0]["start"] == "compiled" and rounds(tmp_path)[0]["prompt"] == first
