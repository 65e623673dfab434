"""`torchweld agent PROBLEM [PROBLEM ...] --base-url URL --model NAME`: the loop with any OpenAI-compatible endpoint."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

from rich.console import Console

USAGE_ERROR = 2
ENDPOINT_ERROR = 4
INTERRUPTED = 130


def register(subparsers) -> None:
    """Add `torchweld agent` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "agent", help="a language model writes ModelNew, the judge grades it, the feedback goes back; repeat",
        description="Run the generate-judge-feedback loop with any OpenAI-compatible chat endpoint (vLLM, SGLang, "
        "Ollama, llama.cpp's server, hosted APIs). Writes OUT/trajectory.jsonl (every round), OUT/<problem>_new.py "
        "(the fastest correct answer) and OUT/summary.txt. Rerunning the same command resumes.")
    arguments(p)
    p.set_defaults(func=run)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("problems", nargs="+", type=Path, metavar="PROBLEM", help="problem files (class Model, "
                   "get_inputs, get_init_inputs)")
    p.add_argument("--base-url", required=True, metavar="URL",
                   help="the endpoint's OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    p.add_argument("--model", required=True, metavar="NAME", help="the model name the endpoint serves")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="environment variable holding the API key (default OPENAI_API_KEY; unset: no key)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="rounds per conversation (default 3)")
    p.add_argument("--samples", type=int, default=1, metavar="K",
                   help="independent conversations per problem (default 1)")
    p.add_argument("--concurrency", type=int, default=4, metavar="C",
                   help="conversations in flight against the endpoint (default 4)")
    p.add_argument("--per-gpu", type=int, default=1, metavar="K",
                   help="judges per GPU (default 1); with K > 1 they overlap building and take turns on the GPU")
    p.add_argument("--start", choices=("blank", "compiled"), default="blank",
                   help="compiled: the first prompt carries torchweld's own ModelNew and its kernel plan, to beat")
    p.add_argument("--out", type=Path, default=Path("out/agent"), metavar="DIR",
                   help="where the trajectory, the best answers and the summary go (default out/agent)")
    p.add_argument("--stream", action="store_true", help="stream replies (long generations behind proxies)")
    p.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                   help="seconds to wait for a reply (with --stream: between chunks); default 600")
    p.add_argument("--retries", type=int, default=6, metavar="N",
                   help="retries of a request on HTTP 429/5xx, timeouts and dropped connections (default 6)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="the longest reply asked for")
    p.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (default: the endpoint's)")


def _usage(args) -> str | None:
    for name in ("rounds", "samples", "concurrency", "per_gpu"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if args.retries < 0 or args.request_timeout <= 0:
        return "--retries must be at least 0 and --request-timeout positive"
    if not args.base_url.startswith(("http://", "https://")):
        return f"--base-url {args.base_url!r} is not an http(s) URL"
    return None


def run(args, judge: Callable | None = None, console: Console | None = None, client_overrides: dict | None = None,
        judge_limit_s: float | None = None) -> int:
    """The subcommand; `judge` (an in-process judge(problem, candidate, slot)) and the overrides exist for tests."""
    from torchweld.agent.client import ChatClient, ClientOptions, EndpointError, Redactor, api_key
    from torchweld.agent.judging import JudgePool, Slot, SubprocessJudge, make_slots, visible_gpus
    from torchweld.agent.loop import Agent, AgentOptions
    from torchweld.agent.rounds_table import render, table
    from torchweld.agent.trajectory import read
    from torchweld.problem import ProblemError, load_problem

    console = console or Console()
    err = Console(stderr=True)
    problem = _usage(args)
    if problem:
        _say(err, f"torchweld agent: {problem}")
        return USAGE_ERROR
    try:
        problems = [load_problem(p) for p in args.problems]
    except (ProblemError, FileNotFoundError) as e:
        _say(err, f"torchweld agent: {e}")
        return USAGE_ERROR
    names = [p.name for p in problems]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        _say(err, f"torchweld agent: problems share a name: {', '.join(dups)}")
        return USAGE_ERROR
    key = api_key(args.api_key_env)
    redact = Redactor(key)
    out = args.out
    real = None
    if judge is None:
        gpus = visible_gpus()
        if not gpus:
            _say(err, "torchweld agent: no CUDA GPU visible: the judge needs one to build, run and time each "
                      "answer (run the agent on a GPU machine)")
            return USAGE_ERROR
        from torchweld.judge import CheckOptions

        real = SubprocessJudge(CheckOptions(), hide_env=(args.api_key_env,))
        pool = JudgePool(real, make_slots(gpus, args.per_gpu, out / "locks"), judge_limit_s or real.limit_s + 60)
        check = real.opts
    else:
        pool = JudgePool(judge, [Slot(None, None)] * args.per_gpu, judge_limit_s or 3600.0)
        check = None
    copts = ClientOptions(base_url=args.base_url, model=args.model, api_key_env=args.api_key_env,
                          timeout_s=args.request_timeout, retries=args.retries, stream=args.stream,
                          max_tokens=args.max_tokens, temperature=args.temperature)
    copts = replace(copts, **(client_overrides or {}))
    try:
        client = ChatClient(copts, key)
    except EndpointError as e:
        _say(err, f"torchweld agent: {e}")
        return USAGE_ERROR
    if key is None:
        _say(console, f"(${args.api_key_env} is not set: no key is sent, as a local server expects)")
    opts = AgentOptions(problems=tuple(p.path for p in problems), out=out, rounds=args.rounds, samples=args.samples,
                        concurrency=args.concurrency, start=args.start, check=check)
    agent = Agent(opts, client, pool, console, args.model, redact)
    try:
        state = agent.run(problems)
    except KeyboardInterrupt:
        agent.state.stop.set()
        if real is not None:
            real.stop_all()
        _say(err, f"torchweld agent: interrupted; {agent.state.rounds_done} round(s) saved in {agent.trajectory}: "
                  "run the same command again to resume")
        return INTERRUPTED
    keys = agent.keys
    events = read(agent.trajectory)
    console.print(table(events, keys, args.rounds))
    (out / "summary.txt").write_text(redact.text(render(events, keys, args.rounds)))
    for name, (speed, _) in sorted(state.best.items()):
        _say(console, f"best {name}: {out / (name + '_new.py')} ({speed:.2f}x eager)")
    _say(console, f"trajectory: {agent.trajectory}")
    if state.fatal:
        _say(err, f"torchweld agent: {state.fatal}")
        return ENDPOINT_ERROR
    return 0


def _say(console: Console, text: str) -> None:
    """One line as it is: no markup, no highlighting, no wrapping (a test or a log reads it whole)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def main(argv=None, **kw) -> int:
    """`python -m torchweld.agent.agent_cli ...`: the subcommand on its own (tests call this with a judge)."""
    p = argparse.ArgumentParser(prog="torchweld agent", description=__doc__)
    arguments(p)
    return run(p.parse_args(argv), **kw)


if __name__ == "__main__":
    sys.exit(main())
