"""The correctness stage: trials of reference vs candidate on fresh inputs, with the runtime checks that ride
along (outputs reused or not ready, inputs mutated, stale memory, lower precision), the kernels the candidate
launches, and its buffers against the original's."""
from __future__ import annotations

import copy

import torch

from torchweld.judge import guards
from torchweld.judge.build import kernel_names
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
        fresh = to_cuda(problem.inputs())
        j.caught(kernel_check(pair, fresh, kernel_names(source), problem.model_cls), "profiled forward")
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


def to_cuda(inputs) -> list:
    return [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]


def clone_all(inputs) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def same_bits(a, b) -> bool:
    """Bitwise equality (NaN payloads included) of two tensors of one shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.detach().contiguous().view(torch.uint8), b.detach().contiguous().view(torch.uint8))


def cheat(check: str, evidence: str) -> dict:
    return {"check": check, "caught": True, "evidence": evidence}


def _ptrs(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor) and t.numel()}


class Pair:
    """The reference and the candidate built from one set of constructor arguments, plus the float64 oracle."""

    def __init__(self, problem, cand_cls, args, kwargs, seed: int, use_oracle: bool):
        torch.manual_seed(seed)
        self.ref = problem.model_cls(*args, **kwargs)
        torch.manual_seed(seed)
        self.cand = cand_cls(*args, **kwargs)
        self.notes = self._load_weights()
        self.ref, self.cand = self.ref.cuda(), self.cand.cuda()
        self.use_oracle, self._m64, self.oracle_error = use_oracle, None, None

    def _load_weights(self) -> list[str]:
        ref_sd, cand_sd = self.ref.state_dict(), self.cand.state_dict()
        shapes = {k: tuple(v.shape) for k, v in ref_sd.items()}
        cshapes = {k: tuple(v.shape) for k, v in cand_sd.items()}
        if shapes == cshapes:
            self.cand.load_state_dict(ref_sd, strict=True)
            return [f"state_dict: {len(shapes)} keys match; the original's weights were loaded into the candidate"]
        missing = sorted(set(shapes) - set(cshapes))
        extra = sorted(set(cshapes) - set(shapes))
        wrong = sorted(k for k in set(shapes) & set(cshapes) if shapes[k] != cshapes[k])
        same_by_order = [tuple(v.shape) for v in ref_sd.values()] == [tuple(v.shape) for v in cand_sd.values()] and all(
            torch.equal(a, b) for a, b in zip(ref_sd.values(), cand_sd.values()))
        note = (f"state_dict keys differ (missing {missing[:4]}, unexpected {extra[:4]}, shape {wrong[:4]}); "
                "the candidate keeps its own seeded weights")
        if same_by_order:
            note += ", which equal the original's in order"
        return [note]

    def truth(self, inputs):
        """The float64 output of a copy of the reference, or None when it cannot be computed."""
        if not self.use_oracle or self.oracle_error:
            return None
        try:
            if self._m64 is None:
                self._m64 = copy.deepcopy(self.ref).double()
            out = self._m64(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                              for x in inputs])
            torch.cuda.synchronize()
            return out
        except Exception as e:  # noqa: BLE001 - no float64 kernel, or no memory: fall back to the table
            self.oracle_error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
            self._m64 = None
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
    ref_in = to_cuda(cpu_inputs)
    cand_in = to_cuda(cpu_inputs)
    reused = False
    if reuse is not None and len(reuse) == len(cand_in) and all(
            not isinstance(a, torch.Tensor) or (a.shape == b.shape and a.dtype == b.dtype) for a, b in zip(reuse, cand_in)):
        # NOTE: same storage, new values: a cache keyed by input address returns a stale result here.
        for a, b in zip(reuse, cand_in):
            if isinstance(a, torch.Tensor):
                a.copy_(b)
        cand_in, reused = reuse, True
    before = clone_all(cand_in)
    ref_out = pair.ref(*ref_in)
    truth = pair.truth(ref_in)
    ref_mutates = any(isinstance(a, torch.Tensor) and not same_bits(a, b) for a, b in zip(ref_in, before))
    if anti_cheat:
        guards.poison_free_memory()
    out = pair.cand(*cand_in)
    # NOTE: a normal caller reads the result on its current stream right away; so does this clone.
    outs = flatten(out)
    snap = [o.clone() for o in outs]
    torch.cuda.synchronize()
    cheats = []
    refs = flatten(ref_out)
    if anti_cheat:
        cheats += _trial_cheats(refs, outs, snap, ref_in, cand_in, before, prev_out, ref_mutates)
    verdict = compare(snap if len(snap) != 1 else snap[0], ref_out, truth, opts.tolerance, opts.oracle_factor, label)
    verdict["reused_inputs"] = reused
    if not verdict["ok"] and not cheats:
        cheats += diagnose(pair, verdict, cpu_inputs, cand_in, ref_out, truth, outs, reused, opts, anti_cheat)
    return verdict, cheats, cand_in, out


def _trial_cheats(refs, outs, snap, ref_in, cand_in, before, prev_out, ref_mutates) -> list[dict]:
    found = []
    for r, o in zip(refs, outs):
        if type(r) is torch.Tensor and type(o) is not torch.Tensor:
            found.append(cheat("lazy_subclass", f"forward returned a {type(o).__module__}.{type(o).__name__}, "
                                                "not a plain torch.Tensor"))
            return found
    for s, o in zip(snap, outs):
        if not same_bits(s, o):
            n = int((s != o).sum()) if s.shape == o.shape else -1
            found.append(cheat("stream_race", f"the output read on the caller's stream right after forward() returned "
                                              f"differs from the same tensor after a device-wide synchronize ({n} "
                                              "elements): the result was not ready, work ran on another stream"))
            break
    ref_aliases = bool(_ptrs(refs) & _ptrs(ref_in))
    if not ref_aliases and _ptrs(outs) & _ptrs(cand_in):
        found.append(cheat("output_reuse", "the output shares storage with an input; the reference's does not"))
    if prev_out is not None and _ptrs(outs) & _ptrs(flatten(prev_out)):
        found.append(cheat("output_reuse", "the output is the same storage as the previous call's output, which the "
                                           "caller still holds (a cached or pooled result buffer)"))
    if not ref_mutates:
        for i, (a, b) in enumerate(zip(cand_in, before)):
            if isinstance(a, torch.Tensor) and not same_bits(a, b):
                found.append(cheat("input_mutation", f"input {i} was changed by the candidate's forward "
                                                     f"({int((a != b).sum())} elements); the reference leaves it alone"))
    return found


def diagnose(pair, verdict, cpu_inputs, cand_in, ref_out, truth, outs, reused, opts, anti_cheat) -> list[dict]:
    """Why a trial failed: stale memory, an address cache, lower precision; [] when it is plainly wrong."""
    refs = flatten(ref_out)
    if all(o.numel() and not bool(o.any()) for o in outs) and any(bool(r.any()) for r in refs):
        verdict["why"] = "output is all zeros; " + verdict["why"]
    frac = max((guards.poison_fraction(o) for o in outs), default=0.0)
    if anti_cheat and frac >= 0.5:
        # Plant the right answer in freed memory: a candidate that returns memory it never wrote now "passes".
        guards.poison_free_memory(plant=refs[0])
        again = pair.cand(*cand_in)
        torch.cuda.synchronize()
        if compare(again, ref_out, truth, opts.tolerance, opts.oracle_factor)["ok"]:
            return [cheat("stale_memory", f"{frac:.0%} of the output was the judge's freed-memory poison; with the "
                                          "reference's result planted in freed memory instead, the candidate returned "
                                          "it: it returns memory it never wrote")]
        verdict["why"] = f"{frac:.0%} of the output never written; " + verdict["why"]
    if anti_cheat and reused:
        fresh = to_cuda(cpu_inputs)
        again = pair.cand(*fresh)
        torch.cuda.synchronize()
        if compare(again, ref_out, truth, opts.tolerance, opts.oracle_factor)["ok"]:
            return [cheat("input_cache", "wrong when new values arrive in the same input storage, right on fresh "
                                         "storage: the result is cached by input address")]
    o, r = outs[0], refs[0]
    if r.dtype == torch.float32 and o.dtype in (torch.float16, torch.bfloat16):
        return [cheat("precision_downgrade", f"returns {str(o.dtype)[6:]} where the reference returns float32")]
    orc = verdict.get("oracle")
    if r.dtype == torch.float32 and o.dtype == torch.float32 and orc and truth is not None:
        levels = pair.low_precision_errors(to_cuda(cpu_inputs), truth)
        level = downgrade_level(orc["cand_rel"], levels, opts.oracle_factor)
        if level and orc["cand_rel"] < 0.05:
            return [cheat("precision_downgrade", f"error vs the float64 truth {orc['cand_rel']:.1e} is what {level} "
                                                 f"computation gives ({levels[level]:.1e}); fp32 gives "
                                                 f"{orc['ref_rel']:.1e}")]
    return []


def stream_probe(pair: Pair, inputs, calls: int) -> list[dict]:
    """Call repeatedly, reading each result on the caller's stream at once: gives a side-stream race more chances."""
    for i in range(calls):
        guards.poison_free_memory()  # so a not-yet-written output holds poison, not last call's equal values
        outs = flatten(pair.cand(*inputs))
        snap = [o.clone() for o in outs]
        torch.cuda.synchronize()
        if not all(same_bits(s, o) for s, o in zip(snap, outs)):
            return [cheat("stream_race", f"probe call {i + 1} of {calls}: the output read on the caller's stream right "
                                         "after forward() returned differs from the same tensor after a device-wide "
                                         "synchronize: the result was not ready, work ran on another stream")]
    return []


def kernel_check(pair: Pair, cand_in, defined: set[str], problem_cls) -> list[dict]:
    """Which kernels the candidate's forward launches, and which modules it calls (the original's?)."""
    found = []
    for name, mod in pair.cand.named_modules():
        if type(mod) is problem_cls or (type(mod).__name__ == "Model" and mod is not pair.cand):
            found.append(cheat("calls_reference", f"submodule '{name}' is an instance of the original Model"))
            return found
    with guards.module_calls() as called:
        launched = guards.cuda_kernels(lambda: pair.cand(*cand_in))
    if any(c is problem_cls or c.__name__ == "Model" for c in called):
        found.append(cheat("calls_reference", "forward() calls the original Model"))
    if launched is None:
        return found
    ours = [k for k in launched if any(_whole_word(d, k) for d in defined)]
    if not defined:
        # NOTE: nothing custom to fall back from: a file of library calls only (what torchweld emits for a
        # lone convolution) is timed as it is; the result says so instead of calling it a cheat.
        return found + [{"check": "no_custom_kernel", "caught": False,
                         "evidence": "defines no CUDA/Triton kernel: forward() runs PyTorch/library ops only"}]
    if not ours:
        seen = [k if len(k) <= 60 else k[:57] + "..." for k in sorted(set(launched))[:3]]
        why = "defines no CUDA/Triton kernel" if not defined else f"none of its kernels {sorted(defined)[:4]} ran"
        found.append(cheat("no_custom_kernel", f"forward() launches no kernel of its own ({why}); "
                                               f"kernels that ran: {seen or 'none'}"))
    return found


def _whole_word(name: str, text: str) -> bool:
    import re

    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None
