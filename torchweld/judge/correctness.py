"""The correctness stage: trials of reference vs candidate on fresh inputs, with the runtime checks that ride
along (outputs reused or not ready, inputs mutated, stale memory, lower precision), the kernels the candidate
launches, and its buffers against the original's."""
from __future__ import annotations

import copy

import torch

from torchweld.judge import attribution, guards
from torchweld.judge.build import kernel_names
from torchweld.judge.guards import cheat
from torchweld.judge.tolerance import compare, downgrade_level, flatten


def stage(j, problem, pair: "Pair", source: str):
    """`opts.trials` trials on fresh inputs (each candidate call after the first on the previous call's input
    storage), then its buffers, the kernels it launches and the stream probe; `j` is the child's Judging."""
    j.stage("correctness")
    opts = j.opts
    cand_in, out = None, None
    for t in range(opts.trials):
        torch.manual_seed(opts.seed * 1000 + 1 + t)
        cpu = problem.inputs()
        verdict, cheats, cand_in, out = run_trial(pair, cpu, f"trial {t + 1} (seed {opts.seed * 1000 + 1 + t})",
                                                  opts, reuse=cand_in, prev_out=out, anti_cheat=opts.anti_cheat)
        j.r["correctness"].append(verdict)
        j.caught(cheats, f"correctness trial {t + 1}")
        if not verdict["ok"]:
            j.finish("wrong", f"wrong output on trial {t + 1}: {verdict['why']}")
    check_buffers(j, pair, f"after {opts.trials} trials")
    if pair.oracle_error:
        j.r["details"].append(f"float64 oracle unavailable ({pair.oracle_error}); the dtype table decided")
    if opts.anti_cheat:
        # NOTE: never-seen inputs, so a result cache cannot hide whether the candidate's own kernels run.
        torch.manual_seed(opts.seed * 1000 + 99)
        fresh = pair.remote.share(problem.inputs())
        outcome, message, cheats, work = kernel_check(pair, fresh, kernel_names(source), opts.decoy_share)
        j.r["work"] = work
        j.caught(cheats, "profiled forward")
        if outcome:
            j.finish(outcome, message)
        j.caught(stream_probe(pair, fresh, opts.stream_probes), "stream probe")
        j.check_environment("after the correctness calls")


def check_buffers(j, pair: "Pair", when: str):
    """Running statistics (and every other buffer) of the candidate against the original's, after
    the same calls on the same inputs: a batch norm in training mode must update them as PyTorch does."""
    verdict = compare_buffers(pair.ref, pair.cand, when)
    if verdict is None:
        return
    j.r["buffers"].append(verdict)
    if not verdict["ok"]:
        j.finish("wrong", f"buffers differ {when}: {verdict['why']}")


def compare_buffers(ref, cand, when: str) -> dict | None:
    """One verdict over every buffer the two models share by name (None when the original has none)."""
    ref_b, cand_b = dict(ref.named_buffers()), dict(cand.named_buffers())
    if not ref_b:
        return None
    missing = sorted(set(ref_b) - set(cand_b))
    if missing:
        return {"inputs": when, "ok": True, "why": f"the candidate has no buffer {missing[0]}: not compared",
                "compared": 0}
    worst = None
    for name, r in ref_b.items():
        v = compare(cand_b[name], r, None, "table", 4.0, name)
        if not v["ok"]:
            return {"inputs": when, "ok": False, "why": f"{name}: {v['why']}", "compared": len(ref_b),
                    "max_abs": v["max_abs"], "rel": v["rel"]}
        if v["rel"] is not None and (worst is None or v["rel"] > worst[1]):
            worst = (name, v["rel"])
    why = f"{len(ref_b)} buffers match" + (f" (worst {worst[0]}, rel {worst[1]:.2e})" if worst else "")
    return {"inputs": when, "ok": True, "why": why, "compared": len(ref_b)}


def error_line(e: BaseException) -> str:
    """An exception's first line (its type where it has no text), at most 300 characters."""
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:300]


def to_dev(inputs, device: str) -> list:
    """The trusted side's own copy of inputs on the judged device (never shared with the candidate)."""
    return [x.to(device, copy=True) if isinstance(x, torch.Tensor) else x for x in inputs]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def clone_all(inputs) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def same_bits(a, b) -> bool:
    """Bitwise equality (NaN payloads included) of two tensors of one shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.detach().contiguous().view(torch.uint8), b.detach().contiguous().view(torch.uint8))


def _ptrs(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor) and t.numel()}


class Pair:
    """The reference (here) and the candidate (in its process, `remote`) built from one set of constructor
    arguments, plus the float64 oracle."""

    def __init__(self, problem, remote, args, kwargs, seed: int, use_oracle: bool):
        torch.manual_seed(seed)
        ref = problem.model_cls(*args, **kwargs)
        # NOTE: the candidate gets a copy of the weights; the reference's own tensors never leave this process.
        self.cand = remote.construct(args, kwargs, seed, ref.state_dict())
        self.notes = self.cand.notes
        self.remote, self.device = remote, remote.device
        self.ref = ref.to(self.device)
        self.use_oracle, self._m64, self.oracle_error = use_oracle, None, None
        self.ref_aliases, self.plain = False, True

    def truth(self, inputs):
        """The float64 output of a copy of the reference, or None when it cannot be computed."""
        if not self.use_oracle or self.oracle_error:
            return None
        try:
            if self._m64 is None:
                self._m64 = copy.deepcopy(self.ref).double()
            out = self._m64(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                              for x in inputs])
            sync(self.device)
            return out
        except Exception as e:  # noqa: BLE001 - no float64 kernel, or no memory: fall back to the table
            self.oracle_error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
            self._m64 = None
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            return None

    def low_precision_errors(self, inputs, truth) -> dict[str, float]:
        """Relative error vs the truth of the reference run in float16 and in bfloat16 (for diagnosis)."""
        levels = {}
        t = flatten(truth)[0].double()
        for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
            try:
                m = copy.deepcopy(self.ref).to(dt)
                out = flatten(m(*[x.to(dt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                  for x in inputs]))[0].double()
                levels[name] = float(torch.linalg.vector_norm(out - t) / torch.linalg.vector_norm(t))
            except Exception:  # noqa: BLE001 - that dtype is not supported by some op: no probe
                continue
        return levels


def run_trial(pair: Pair, cpu_inputs: list, label: str, opts, reuse: list | None = None, prev_out=None,
              anti_cheat: bool = True) -> tuple[dict, list[dict], list, object]:
    """One trial: (verdict, cheats caught, the candidate's inputs, the candidate's output)."""
    ref_in = to_dev(cpu_inputs, pair.device)
    cand_in = pair.remote.share(cpu_inputs)
    reused = False
    if reuse is not None and len(reuse) == len(cand_in) and all(
            not isinstance(a, torch.Tensor) or (a.shape == b.shape and a.dtype == b.dtype)
            for a, b in zip(reuse, cand_in)):
        # NOTE: same storage, new values: a cache keyed by input address returns a stale result here.
        for a, b in zip(reuse, cand_in):
            if isinstance(a, torch.Tensor):
                a.copy_(b)
        cand_in, reused = reuse, True
    before = clone_all(cand_in)
    ref_out = pair.ref(*ref_in)
    truth = pair.truth(ref_in)
    refs = flatten(ref_out)
    ref_mutates = any(isinstance(a, torch.Tensor) and not same_bits(a, b) for a, b in zip(ref_in, before))
    pair.ref_aliases = bool(_ptrs(refs) & _ptrs(ref_in))
    pair.plain = all(type(r) is torch.Tensor for r in refs)
    sync(pair.device)
    reply = pair.cand.call(cand_in, poison=anti_cheat, check=anti_cheat, ref_aliases=pair.ref_aliases,
                           plain=pair.plain)
    cheats = list(reply.cheats) if anti_cheat else []
    if reply.outs is None:
        return {"inputs": label, "ok": False, "why": "not compared: a check caught the call", "max_abs": None,
                "rel": None, "first_bad": [], "n_bad": 0, "oracle": None}, cheats, cand_in, None
    # NOTE: read once, here: what is judged is this copy, whatever the candidate's process does afterwards.
    outs = [o.clone() for o in reply.outs]
    if anti_cheat and not ref_mutates:
        cheats += _mutations(cand_in, before)
    verdict = compare(outs if len(outs) != 1 else outs[0], ref_out, truth, opts.tolerance, opts.oracle_factor, label)
    verdict["reused_inputs"] = reused
    if not verdict["ok"] and not cheats:
        cheats += diagnose(pair, verdict, cpu_inputs, cand_in, ref_out, truth, outs, reused, opts, anti_cheat)
    return verdict, cheats, cand_in, outs


def _mutations(cand_in, before) -> list[dict]:
    """The candidate's inputs as this side sees them (shared memory) against their values before the call."""
    for i, (a, b) in enumerate(zip(cand_in, before)):
        if isinstance(a, torch.Tensor) and not same_bits(a, b):
            return [cheat("input_mutation", f"input {i} was changed by the candidate's forward "
                                            f"({int((a != b).sum())} elements); the reference leaves it alone")]
    return []


def diagnose(pair, verdict, cpu_inputs, cand_in, ref_out, truth, outs, reused, opts, anti_cheat) -> list[dict]:
    """Why a trial failed: stale memory, an address cache, lower precision; [] when it is plainly wrong."""
    refs = flatten(ref_out)
    if all(o.numel() and not bool(o.any()) for o in outs) and any(bool(r.any()) for r in refs):
        verdict["why"] = "output is all zeros; " + verdict["why"]
    frac = max((guards.poison_fraction(o) for o in outs), default=0.0)
    if anti_cheat and frac >= 0.5:
        # Plant the right answer in freed memory: a candidate that returns memory it never wrote now "passes".
        # NOTE: the reference's answer goes to the candidate's process only here, where passing is the catch.
        again = pair.cand.call(cand_in, poison=True, plant=pair.remote.share([refs[0]])[0]).out
        if compare(again, ref_out, truth, opts.tolerance, opts.oracle_factor)["ok"]:
            return [cheat("stale_memory", f"{frac:.0%} of the output was the judge's freed-memory poison; with the "
                                          "reference's result planted in freed memory instead, the candidate returned "
                                          "it: it returns memory it never wrote")]
        verdict["why"] = f"{frac:.0%} of the output never written; " + verdict["why"]
    if anti_cheat and reused:
        fresh = pair.remote.share(cpu_inputs)
        again = pair.cand.call(fresh).out
        if compare(again, ref_out, truth, opts.tolerance, opts.oracle_factor)["ok"]:
            return [cheat("input_cache", "wrong when new values arrive in the same input storage, right on fresh "
                                         "storage: the result is cached by input address")]
    o, r = outs[0], refs[0]
    if r.dtype == torch.float32 and o.dtype in (torch.float16, torch.bfloat16):
        return [cheat("precision_downgrade", f"returns {str(o.dtype)[6:]} where the reference returns float32")]
    orc = verdict.get("oracle")
    if r.dtype == torch.float32 and o.dtype == torch.float32 and orc and truth is not None:
        levels = pair.low_precision_errors(to_dev(cpu_inputs, pair.device), truth)
        level = downgrade_level(orc["cand_rel"], levels, opts.oracle_factor)
        if level and orc["cand_rel"] < 0.05:
            return [cheat("precision_downgrade", f"error vs the float64 truth {orc['cand_rel']:.1e} is what {level} "
                                                 f"computation gives ({levels[level]:.1e}); fp32 gives "
                                                 f"{orc['ref_rel']:.1e}")]
    return []


def stream_probe(pair: Pair, inputs, calls: int) -> list[dict]:
    """Call repeatedly, reading each result on the caller's stream at once: gives a side-stream race more chances."""
    for i in range(calls):
        # NOTE: freed memory poisoned first, so a not-yet-written output holds poison, not last call's values.
        reply = pair.cand.call(inputs, poison=True, check=True, ref_aliases=pair.ref_aliases, plain=pair.plain)
        if reply.cheats:
            c = dict(reply.cheats[0])
            c["evidence"] = f"probe call {i + 1} of {calls}: " + c["evidence"]
            return [c]
    return []


def kernel_check(pair: Pair, cand_in, defined: set[str], decoy_share: float):
    """Which modules the candidate's forward calls (the original's?) and whose kernels do its work:
    (outcome or None, message, cheats, the work split)."""
    seen = pair.cand.profile(cand_in)
    if seen["reference_submodule"] is not None:
        return None, "", [cheat("calls_reference", f"submodule '{seen['reference_submodule']}' is an instance of "
                                                   "the original Model")], None
    if seen["calls_model"]:
        return None, "", [cheat("calls_reference", "forward() calls the original Model")], None
    kernels = seen["kernels"]
    if kernels is not None and not defined:
        # NOTE: nothing custom to fall back from: a file of library calls only (what torchweld emits for a
        # lone convolution) is timed as it is; the result says so instead of calling it a cheat.
        return None, "", [{"check": "no_custom_kernel", "caught": False, "evidence": "defines no CUDA/Triton "
                           "kernel: forward() runs PyTorch/library ops only"}], None
    return attribution.verdict([tuple(k) for k in kernels] if kernels is not None else None, defined, decoy_share)
