"""The candidate's process: the only place the candidate's code runs.

It holds what it is sent and nothing else: the weights (a state dict), the input tensors (shared memory or
CUDA IPC), and its end of the channel (channel.py). It never sees the problem's Model, the inputs' seeds,
the reference's outputs, the comparison, the timing statistics or the result. Every call of the candidate
goes through one function (`_call`) whether the judge checks or times it, so nothing on the stack tells the
two apart. Its reports (kernels, tripwires, threads) are the candidate's process's word; the trusted
process (remote.py) decides with what it can see for itself.

Usage: python -m torchweld.judge.candidate_process FD DEVICE CPU_S MEMORY_BYTES
(FD: a connected Unix socket, the channel)
"""
from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

import torch

from torchweld.judge import guards
from torchweld.judge.channel import Channel, ChannelClosed
from torchweld.judge.correctness import _ptrs, cheat, error_line, same_bits
from torchweld.judge.tolerance import flatten


class Runner:
    """Answers the trusted process's requests, one at a time."""

    def __init__(self, ch: Channel, device: str):
        # NOTE: first, before any candidate code exists: calls are timed with these.
        self.clocks = guards.RealClocks()
        self.ch, self.device, self.cuda = ch, device, device.startswith("cuda")
        self.models: dict[int, torch.nn.Module] = {}
        self.module = None
        self.wires = None
        self.keep: list = []  # the last call's output, alive: same storage keeps its address
        # NOTE: the inputs of the last calls stay mapped: a rotating set arrives as the storage already
        # mapped (no new mmap or CUDA IPC open inside a timed request), at the same address.
        self.recent: collections.deque = collections.deque(maxlen=8)
        self.prev_outs: list = []

    # ---- the loop --------------------------------------------------------------------------------
    def serve(self):
        while True:
            try:
                req = self.ch.recv()
            except ChannelClosed:
                return
            op = req.get("op")
            if op == "bye":
                self.ch.send({"ok": True})
                return
            try:
                reply = getattr(self, "op_" + op)(req)
            except Exception as e:  # noqa: BLE001 - the candidate's exception is a reply, not the runner's end
                reply = {"error": f"{type(e).__name__}: {error_line(e)}"}
            self.ch.send(reply)

    # ---- requests -----------------------------------------------------------------------------------
    def op_ping(self, req):
        """Before the import: warms the channel (and CUDA IPC) and calibrates the round trip."""
        if self.cuda and not torch.cuda.is_initialized():
            torch.zeros(1, device=self.device)
        # NOTE: a new tensor each time, sent as an output is: what sending one costs is part of the round trip.
        fresh = torch.ones(req["fresh"], device=self.device)
        self.keep = [fresh]
        self._sync()
        return {"ok": True, "pid": os.getpid(), "got": isinstance(req.get("tensor"), torch.Tensor), "fresh": fresh}

    def op_import(self, req):
        from torchweld.judge.build import BuildError, import_candidate
        from torchweld.judge.tripwires import Tripwires

        # NOTE: the reference's precision, set here by the judge's launcher before any candidate code runs.
        guards.set_fp32(req.get("allow_tf32", False))
        self.flags0 = guards.precision_flags()
        self.threads0, self.kids0 = guards.thread_count(), guards.child_pids()
        self.wires = Tripwires(req["source_path"])
        path = Path(req["source_path"])
        try:
            self.module, secs = import_candidate(path, path.read_text(), Path(req["log_path"]))
        except BuildError as e:
            return {"build_error": {"message": e.message, "details": e.details, "seconds": e.seconds}}
        return {"ok": True, "build_s": secs}

    def op_offline(self, req):
        """The build-only stage (no GPU): its outcome is no_build, timeout or no_gpu, never a verdict on values."""
        from torchweld.judge import offline
        from torchweld.judge.check_options import CheckOptions
        from torchweld.problem import load_problem

        j = _Offline(req, CheckOptions.from_json(req["opts"]))
        try:
            offline.stage(j, load_problem(Path(req["problem_path"])), req["why"])
        except _Done:
            pass
        return {"result": j.r}

    def op_construct(self, req):
        torch.manual_seed(req["seed"])
        model = self.module.ModelNew(*req["args"], **req["kwargs"])
        notes = _load_weights(model, req["state"])
        self.models[req["id"]] = model.to(self.device)
        return {"notes": notes}

    def op_alive(self, req):
        if self.cuda:
            torch.zeros(1, device=self.device).add_(1).item()
            torch.cuda.synchronize()
        return {"ok": True}

    def op_train(self, req):
        self.models[req["id"]].train(req["mode"])
        return {"ok": True}

    def op_buffers(self, req):
        return {"buffers": {k: b.detach().clone() for k, b in self.models[req["id"]].named_buffers()}}

    def op_env(self, req):
        """Clocks, precision flags, threads, child processes and tripwires against their state before the import."""
        where, found = req["where"], []
        changed = self.clocks.changed()
        if changed:
            found.append(cheat("timer_patch", f"{where}: replaced {', '.join(changed[:4])}"))
        flags = guards.precision_flags()
        diff = {k: (self.flags0[k], v) for k, v in flags.items() if self.flags0.get(k) != v}
        if diff:
            found.append(cheat("tf32_flags", f"{where}: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items())))
        threads = guards.thread_count()
        if threads > self.threads0:
            found.append(cheat("threads", f"{where}: {threads - self.threads0} more Python thread(s) alive "
                                          f"({self.threads0} -> {threads})"))
        kids = guards.child_pids() - self.kids0
        if kids:
            found.append(cheat("subprocess", f"{where}: {len(kids)} child process(es) alive: pids {sorted(kids)[:4]}"))
        if self.wires is not None:
            found += self.wires.tripped(where)
        return {"cheats": found}

    def op_call(self, req):
        """One call of the candidate, the same code whether it is checked or timed: (outputs, ms, what the
        checks that need the candidate's own stream saw)."""
        model, args = self.models[req["id"]], req["args"]
        if self.cuda and req.get("poison"):
            guards.poison_free_memory(plant=req.get("plant"))
        start, out = self._call(model, args)
        outs = flatten(out)
        check = req.get("check")
        lazy = check and req.get("plain", True) and any(type(o) is not torch.Tensor for o in outs)
        # NOTE: a normal caller reads the result on its current stream right away; so does this clone.
        snap = [o.clone() for o in outs] if check and not lazy else None
        self._sync()
        ms = self._ms(start)
        found = self._checks(outs, snap, args, req.get("ref_aliases", False)) if check and not lazy else []
        if lazy:
            o = next(o for o in outs if type(o) is not torch.Tensor)
            found = [cheat("lazy_subclass", f"forward returned a {type(o).__module__}.{type(o).__name__}, "
                                            "not a plain torch.Tensor")]
        if self.wires is not None and self.wires.flips:
            found += self.wires.tripped("during forward")
        sent = None if found else snap if check else [self._sendable(o, args) for o in outs]
        self.keep, self.prev_outs = [out], outs
        self.recent.append(args)
        return {"outs": sent, "ms": ms, "cheats": found}

    def op_profile(self, req):
        """The kernels one forward launches, each with its GPU time, and the modules it calls."""
        model, args = self.models[req["id"]], req["args"]
        subs = [n for n, m in model.named_modules() if type(m).__name__ == "Model" and m is not model]
        with guards.module_calls() as called, torch.no_grad():
            if self.cuda:
                kernels = guards.cuda_kernel_times(lambda: model(*args))
            else:
                model(*args)
                kernels = None  # the CPU has no kernels of the candidate's to attribute
        return {"kernels": kernels, "reference_submodule": subs[0] if subs else None,
                "calls_model": any(c.__name__ == "Model" for c in called)}

    # ---- the call ---------------------------------------------------------------------------------
    def _sync(self):
        if self.cuda:
            self.clocks.synchronize()

    def _call(self, model, args):
        """(a start mark for `_ms`, the output); the end is marked on the caller's stream, not waited for."""
        wires = self.wires
        if wires is not None:
            wires.in_call = True
        try:
            with torch.no_grad():
                c = self.clocks
                if self.cuda:
                    s, e = c.event(), c.event()
                    c.record(s)
                    out = model(*args)
                    c.record(e)
                    return (s, e), out
                t0 = c.perf_counter()
                out = model(*args)
                return (t0, c.perf_counter()), out
        finally:
            if wires is not None:
                wires.in_call = False

    def _sendable(self, o: torch.Tensor, args) -> torch.Tensor:
        """The output as it can cross back: a tensor this process received (an input, or a view of one) is
        cloned first, since CUDA IPC cannot send on what it received."""
        got = _ptrs(args) | {p for a in self.recent for p in _ptrs(a)}
        return o.detach().clone() if _ptrs([o]) & got else o.detach()

    def _ms(self, start) -> float:
        s, e = start
        return self.clocks.elapsed_time(s, e) if self.cuda else (e - s) * 1e3

    def _checks(self, outs, snap, args, ref_aliases: bool) -> list[dict]:
        """Ready on the caller's stream, not an input's or the previous call's storage."""
        found = []
        for s, o in zip(snap, outs):
            if not same_bits(s, o):
                found.append(cheat("stream_race", "the output read on the caller's stream right after forward() "
                                                  "returned differs from the same tensor after a device-wide "
                                                  "synchronize: the result was not ready, work ran on another stream"))
                break
        if not ref_aliases and _ptrs(outs) & _ptrs(args):
            found.append(cheat("output_reuse", "the output shares storage with an input; the reference's does not"))
        if _ptrs(outs) & _ptrs(self.prev_outs):
            found.append(cheat("output_reuse", "the output is the same storage as the previous call's output, which "
                                               "the caller still holds (a cached or pooled result buffer)"))
        return found


def _load_weights(model, state: dict) -> list[str]:
    """The original's weights into the candidate where names and shapes match; else a note on why not."""
    cand = model.state_dict()
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    cshapes = {k: tuple(v.shape) for k, v in cand.items()}
    if shapes == cshapes:
        model.load_state_dict(state, strict=True)
        return [f"state_dict: {len(shapes)} keys match; the original's weights were loaded into the candidate"]
    missing = sorted(set(shapes) - set(cshapes))
    extra = sorted(set(cshapes) - set(shapes))
    wrong = sorted(k for k in set(shapes) & set(cshapes) if shapes[k] != cshapes[k])
    same = [tuple(v.shape) for v in state.values()] == [tuple(v.shape) for v in cand.values()] and all(
        torch.equal(a, b.cpu()) for a, b in zip(state.values(), cand.values()))
    note = (f"state_dict keys differ (missing {missing[:4]}, unexpected {extra[:4]}, shape {wrong[:4]}); "
            "the candidate keeps its own seeded weights")
    return [note + (", which equal the original's in order" if same else "")]


class _Done(Exception):
    pass


class _Offline:
    """The slice of the trusted Judging that offline.stage uses, collecting its result here."""

    def __init__(self, req, opts):
        self.opts, self.source_path = opts, Path(req["source_path"])
        self.result_path = Path(req["log_dir"]) / "result.json"
        self.t0 = time.monotonic() - req["elapsed_s"]
        self.r = {"outcome": None, "message": "", "details": [], "build": None, "build_s": None}

    def stage(self, name):
        pass

    def finish(self, outcome, message):
        self.r.update(outcome=outcome, message=message)
        raise _Done


def main(argv: list[str]) -> int:
    from torchweld.judge.sandbox import confine

    ch = Channel.from_fd(int(argv[0]))
    device, cpu_s, memory = argv[1], int(argv[2]), int(argv[3])
    confine(cpu_s, memory or None)
    if device == "cpu":
        torch.set_num_threads(1)  # tests: two processes share the host; one thread each keeps times comparable
    try:
        Runner(ch, device).serve()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # NOTE: no interpreter teardown: a candidate's threads or a broken CUDA context can hang it.
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
