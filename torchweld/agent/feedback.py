"""A judge result -> the next user message: what went wrong (or how fast it was), in terms the model can act on.

Reads only the result's documented keys (docs/judge.md): outcome, message, details, correctness and
generalization entries (inputs ok max_abs rel first_bad n_bad why), cheats (check caught evidence), static
(rule line text), timing (eager_ms compile_ms candidate_ms speedup_vs_eager speedup_vs_compile), and `profile`
where a judge reports one (a list of {name, ms}). The agent's own outcomes (no_code, truncated, judge_error)
never reach the judge.
"""
from __future__ import annotations

import re

from torchweld.agent import prompt
from torchweld.agent.locate import locate, mentions, refs

MAX_LINES = 12  # detail lines passed on; more is noise to the model
MAX_CHARS = 300


def _clip(s: str) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= MAX_CHARS else s[:MAX_CHARS - 3] + "..."


def _num(x, fmt: str = "{:.3g}") -> str:
    return "n/a" if x is None else fmt.format(x)


def no_code(text: str, n_blocks: int, n_python: int) -> str:
    if n_blocks == 0:
        what = "Your reply has no fenced code block"
    else:
        what = f"Your reply has {n_blocks} fenced block(s), {n_python} of them python, and none defines class ModelNew"
    return f"{what}, so there was nothing to build or run. {prompt.AGAIN}"


def truncated(code: str, finish_reason: str | None) -> str:
    lines = code.rstrip().splitlines()
    last = lines[-1].strip() if lines else ""
    why = "the reply hit the length limit" if finish_reason == "length" else "its code block is never closed"
    return (f"Your reply was cut off ({why}): the code stops after {len(lines)} lines, at `{_clip(last)}`. "
            "Nothing was run. Send the complete file again in one ```python block, with the explanation kept "
            "short so that the code fits.")


def judge_error(message: str) -> str:
    return (f"The harness failed to grade your last answer ({_clip(message)}). This was not caused by your "
            f"code. {prompt.AGAIN}")


def render(result: dict, code: str = "") -> str:
    """The feedback for one judged candidate."""
    outcome = result.get("outcome")
    body = {"no_build": _no_build, "runtime_error": _runtime, "timeout": _timeout, "wrong": _wrong,
            "cheat": _cheat, "correct": _correct}.get(outcome, _other)(result, code)
    notes = _static(result) if outcome != "cheat" else []
    tail = prompt.FASTER if outcome == "correct" else prompt.AGAIN
    return "\n".join(body + notes + ["", tail])


def _details(result: dict, skip=()) -> list[str]:
    out = [f"  {_clip(d)}" for d in result.get("details") or [] if not any(s in d for s in skip)]
    return out[:MAX_LINES]


def _no_build(result: dict, code: str) -> list[str]:
    msg = result.get("message", "")
    lines = [f"It did not build: {_clip(msg)}"]
    details = result.get("details") or []
    if details:
        lines.append("Compiler output:")
        lines += _details(result)
    ext = re.search(r"extension (\S+) failed", msg)
    pointed = []
    for ref in refs("\n".join([msg, *details])):
        where = locate(code, ref, ext.group(1) if ext else None)
        if where is not None:
            pointed.append(f"  {ref} is your line {where.line}: `{_clip(where.text)}`"
                           + (f" ({where.note})" if where.note else ""))
    if pointed:
        lines.append("Where the errors point in your file:")
        lines += pointed
    names = re.search(r"\(names: ([^)]*)\)", msg)
    for name in [n.strip() for n in names.group(1).split(",")] if names else []:
        seen = mentions(code, name)
        if seen:
            lines.append(f"`{name}` appears in your file at: " + "; ".join(
                f"line {w.line}" + (f" ({w.note})" if w.note else "") + f": `{_clip(w.text)}`" for w in seen))
        else:
            lines.append(f"`{name}` appears nowhere in your file.")
    return lines


def _runtime(result: dict, code: str) -> list[str]:
    lines = [f"It built, then failed at run time: {_clip(result.get('message', ''))}"]
    if result.get("details"):
        lines.append("Last lines it printed / notes:")
        lines += _details(result)
    return lines


def _timeout(result: dict, code: str) -> list[str]:
    return [f"No result within the time limit: {_clip(result.get('message', ''))}. Look for a hang (a loop "
            "that never ends, a deadlock, a launch that never returns) or a kernel far too slow for the sizes."]


def _entry(e: dict) -> str:
    parts = [f"{label} {_num(e.get(k))}" for k, label in (("max_abs", "max abs error"), ("rel", "relative error"))
             if e.get(k) is not None]
    text = f"{e.get('inputs', '?')}: " + (", ".join(parts) if parts else "wrong")
    if e.get("first_bad"):
        text += f", first bad index {e['first_bad'][0] if isinstance(e['first_bad'][0], list) else e['first_bad']}"
    if e.get("n_bad"):
        text += f", {e['n_bad']} elements off"
    if e.get("why"):
        text += f" ({_clip(e['why'])})"
    return text


def _wrong(result: dict, code: str) -> list[str]:
    lines = [f"It runs but gives wrong results: {_clip(result.get('message', ''))}"]
    trials, variants = result.get("correctness") or [], result.get("generalization") or []
    bad_trials = [e for e in trials if not e.get("ok")]
    bad_vars = [e for e in variants if not e.get("ok")]
    if bad_trials:
        lines.append("On the problem's own sizes:")
        lines += [f"  {_entry(e)}" for e in bad_trials[:MAX_LINES]]
    elif trials:
        lines.append(f"It is right on all {len(trials)} trials at the problem's own sizes.")
    if bad_vars:
        good = [e.get("inputs", "?") for e in variants if e.get("ok")]
        lines.append("It is wrong on other sizes or constructor arguments (each variant changes one thing):")
        lines += [f"  {_entry(e)}" for e in bad_vars[:MAX_LINES]]
        if good:
            lines.append(f"  right on: {', '.join(good[:MAX_LINES])}")
        lines.append("Make the kernel correct for every valid value of these, not only the example's.")
    lines += _details(result, skip=("state_dict",))
    return lines


def _cheat(result: dict, code: str) -> list[str]:
    cheats = [c for c in result.get("cheats") or [] if c.get("caught", True)]
    lines = [f"Rejected by the anti-cheat checks: {_clip(result.get('message', ''))}"]
    for c in cheats[:MAX_LINES]:
        lines.append(f"  check {c.get('check')}: {_clip(c.get('evidence', ''))}")
    static = result.get("static") or []
    if static:
        lines.append("Lines of your file that look related:")
        lines += [f"  line {f.get('line')}: {f.get('rule')}: {_clip(f.get('text', ''))}" for f in static[:MAX_LINES]]
    lines.append("Compute the output with your own kernels on every call, on the current stream, with no cached "
                 "results, no side streams or threads, and no changes to global settings.")
    return lines


def _correct(result: dict, code: str) -> list[str]:
    n, g = len(result.get("correctness") or []), len(result.get("generalization") or [])
    lines = [f"Correct: right on {n} trials and {g} other sizes / constructor arguments."]
    t = result.get("timing") or {}
    if t.get("candidate_ms") is not None:
        lines.append(f"Median time: yours {_num(t.get('candidate_ms'), '{:.4f}')} ms; eager PyTorch "
                     f"{_num(t.get('eager_ms'), '{:.4f}')} ms ({_num(t.get('speedup_vs_eager'), '{:.2f}')}x); "
                     f"torch.compile {_num(t.get('compile_ms'), '{:.4f}')} ms "
                     f"({_num(t.get('speedup_vs_compile'), '{:.2f}')}x). Above 1x is faster than them.")
    else:
        lines.append("It was not timed.")
    profile = result.get("profile") or []
    if profile:
        lines.append("Where the time goes (top kernels of one forward):")
        lines += [f"  {_clip(k.get('name', '?'))}: {_num(k.get('ms'), '{:.4f}')} ms" for k in profile[:6]]
    lines += [f"  {_clip(d)}" for d in result.get("details") or [] if "no custom kernel" in d or "defines no" in d]
    return lines


def _other(result: dict, code: str) -> list[str]:
    return [f"Result: {result.get('outcome')}: {_clip(result.get('message', ''))}"] + _details(result)


def _static(result: dict) -> list[str]:
    found = result.get("static") or []
    if not found:
        return []
    return ["Notes from a scan of your file (not failures by themselves):"] + [
        f"  line {f.get('line')}: {f.get('rule')}: {_clip(f.get('text', ''))}" for f in found[:6]]
