"""The trusted side of the process boundary: starts the candidate's process (candidate_process.py) in its sandbox and
stands in for the candidate's models, so the stages can call `pair.cand` as they would a module.

What this side keeps to itself: the problem, its Model and the reference's outputs, the inputs' seeds and
values, the comparison, every clock that decides, and the result. What it sends: constructor arguments, a
copy of the weights, the candidate's own inputs (shared memory or CUDA IPC from a memory pool of their own,
so no handle reaches other memory of this process), and requests.
"""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from torchweld.judge import sandbox
from torchweld.judge.channel import Channel, ChannelClosed
from torchweld.judge.correctness import cheat
from torchweld.runtime.site_timing import median


# NOTE: tests on CPU tensors share a host whose scheduling adds milliseconds to a round trip; on a GPU the
# judge's own host is quiet while it times (judge/quiet.py), and the slack is 0.1 ms.
_CPU_SLACK_MS = 5.0


class CandidateError(Exception):
    """The candidate's code raised in its process; the message is its one line."""


class RunnerDied(BaseException):
    """The candidate's process ended (a crash, a signal, its own exit) while a request was open, or its CUDA
    context broke. NOTE: a BaseException, so the stages' `except Exception` (a variant the candidate fails)
    never takes it for one failed call: nothing after it is sound."""


class Reply:
    """One call's answer: outputs (None where a check caught the call), the candidate's ms, its checks' cheats."""

    def __init__(self, d: dict):
        self.outs, self.ms, self.cheats = d.get("outs"), d.get("ms"), d.get("cheats", [])

    @property
    def out(self):
        return self.outs[0] if self.outs and len(self.outs) == 1 else self.outs


class Remote:
    """The candidate's process: one per judging run, every model of the candidate lives in it."""

    def __init__(self, device: str, scratch: Path, repo_root: str, limit_s: float, memory_gb: float):
        self.device, self.cuda = device, device.startswith("cuda")
        self.scratch, self.repo_root, self.limit_s, self.memory_gb = scratch, repo_root, limit_s, memory_gb
        self.proc: subprocess.Popen | None = None
        self.walls: list[tuple[float, float]] = []  # (wall ms less the round trip, the candidate's ms) per timed call
        self.rtt_ms, self.ms_per_byte = 0.0, 0.0
        self.pool = torch.cuda.MemPool() if self.cuda and hasattr(torch.cuda, "MemPool") else None
        self._ids = 0
        self.tier, self.notes = "none", []

    # ---- the process ---------------------------------------------------------------------------
    def start(self, tiers: list[str]) -> None:
        """Start the runner in the strongest sandbox; `ready()` waits for it (this side works meanwhile)."""
        self._tiers = list(tiers)
        self._spawn(self._tiers[0])

    def ready(self) -> None:
        """Wait until the runner answers (and, on a GPU, shares a tensor); where it cannot in a sandbox, the
        next one is tried."""
        for k, tier in enumerate(self._tiers):
            try:
                if k:
                    self._spawn(tier)
                self._calibrate()
                self.tier = tier
                return
            except (RunnerDied, CandidateError, OSError) as e:
                self.notes.append(f"sandbox {tier} could not run the candidate's process ({e}); trying the next")
                self.close()
        raise RunnerDied("the candidate's process did not start")

    def _spawn(self, tier: str) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd = [sys.executable, "-m", "torchweld.judge.candidate_process", str(theirs.fileno()), self.device,
               str(int(self.limit_s) + 5), str(int(self.memory_gb * 2**30))]
        self.err_path = self.scratch / "runner.stderr"
        with open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(sandbox.wrap(tier, cmd, self.scratch, pid=not self.cuda), stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err, cwd=self.scratch,
                                         env=sandbox.runner_env(self.scratch, self.repo_root),
                                         pass_fds=(theirs.fileno(),))
        theirs.close()
        self.ch = Channel(mine)

    def _calibrate(self, n: int = 8) -> None:
        """The round trip of a request carrying a tensor each way, before any candidate code exists, for a
        small and a 4 MB reply: what a timed call's wall time holds besides the call (`overhead_ms`)."""
        probe = self.share([torch.zeros(16)])[0]
        rtt = {}
        for size in (16, 1 << 20):
            walls = []
            for _ in range(n):
                t0 = time.perf_counter()
                r = self.request({"op": "ping", "tensor": probe, "fresh": size})
                walls.append((time.perf_counter() - t0) * 1e3)
                if not r.get("got") or not isinstance(r.get("fresh"), torch.Tensor):
                    raise RunnerDied("the candidate's process could not exchange a tensor")
            rtt[size * 4] = median(walls[2:])
        self.runner_pid = r["pid"]
        (b0, t0), (b1, t1) = sorted(rtt.items())
        self.rtt_ms, self.ms_per_byte = t0, max(t1 - t0, 0.0) / (b1 - b0)
        self.kids0 = sandbox.descendants(self.proc.pid)

    def overhead_ms(self, out_bytes: int) -> float:
        """A request's wall time besides the call, for a reply of `out_bytes`."""
        return self.rtt_ms + self.ms_per_byte * out_bytes

    def status(self) -> str:
        """How the runner ended, in words (after it did)."""
        rc = self.proc.poll() if self.proc else None
        if rc is None:
            return "the candidate's process closed its channel"
        if rc > 128 and self.tier == "bwrap":
            rc = 128 - rc  # NOTE: bubblewrap exits with 128 + the signal that killed what it ran
        if rc < 0:
            import signal

            with contextlib.suppress(ValueError):
                return f"the candidate's process died of {signal.Signals(-rc).name}"
        return f"the candidate's process exited with code {rc}"

    def request(self, msg: dict) -> dict:
        self.send(msg)
        return self.receive()

    def send(self, msg: dict) -> None:
        try:
            self.ch.send(msg)
        except ChannelClosed:
            time.sleep(0.2)
            raise RunnerDied(self.status() + self._stderr()) from None

    def receive(self) -> dict:
        """The answer to the request sent last (this side may work between `send` and this)."""
        try:
            reply = self.ch.recv()
        except ChannelClosed:
            time.sleep(0.2)
            raise RunnerDied(self.status() + self._stderr()) from None
        if not isinstance(reply, dict):
            raise RunnerDied("the candidate's process answered out of protocol")
        if "error" in reply:
            raise CandidateError(str(reply["error"])[:400])
        return reply

    def _stderr(self) -> str:
        try:
            lines = [ln for ln in self.err_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        hint = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "")
        return f": {hint[:300]}" if hint else ""

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            self.ch.send({"op": "bye"})
        with contextlib.suppress(Exception):
            self.ch.close()
        sandbox.kill_tree(self.proc)
        self.proc = None

    # ---- what crosses --------------------------------------------------------------------------
    def share(self, inputs: list) -> list:
        """The candidate's copy of `inputs` on the judged device, in memory that holds nothing else of ours."""
        ctx = torch.cuda.use_mem_pool(self.pool) if self.pool is not None else contextlib.nullcontext()
        with ctx:
            return [x.to(self.device, copy=True) if isinstance(x, torch.Tensor) else x for x in inputs]

    def import_candidate(self, source_path: Path, log_path: Path, allow_tf32: bool) -> None:
        """Send the import (its build can take minutes); its answer is `receive()`d later."""
        self.send({"op": "import", "source_path": str(source_path), "log_path": str(log_path),
                   "allow_tf32": allow_tf32})

    def construct(self, args, kwargs, seed: int, state: dict) -> "RemoteModel":
        self._ids += 1
        # NOTE: CPU copies in shared memory: the candidate gets its own weights, never the reference's tensors.
        weights = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
        r = self.request({"op": "construct", "id": self._ids, "args": list(args), "kwargs": dict(kwargs),
                          "seed": seed, "state": weights})
        return RemoteModel(self, self._ids, r["notes"])

    def alive(self) -> None:
        """Raise RunnerDied where the candidate's CUDA context is broken (an illegal address, a device assert)."""
        try:
            self.request({"op": "alive"})
        except CandidateError as e:
            raise RunnerDied(f"the candidate's CUDA context is broken: {e}") from None

    def environment(self, where: str) -> list[dict]:
        """The runner's own checks, and the processes below it as this side sees them in /proc."""
        found = self.request({"op": "env", "where": where})["cheats"]
        kids = sandbox.descendants(self.proc.pid) - self.kids0
        if kids and not any(c["check"] == "subprocess" for c in found):
            found.append(cheat("subprocess", f"{where}: {len(kids)} process(es) below the candidate's process "
                                             f"that were not there before its import: pids {sorted(kids)[:4]}"))
        return found

    def timed_check(self, min_calls: int = 10) -> dict | None:
        """The candidate's own call times against this side's wall time of the same requests, less the round
        trip measured before its import: the candidate's times are its process's word, the wall is ours."""
        if len(self.walls) < min_calls:
            return None
        est = sorted(w for w, _ in self.walls)
        said = median([m for _, m in self.walls])
        # NOTE: the host's noise only ever adds to a wall time, so its lower quartile is the fair bound: a
        # busy host cannot make an honest candidate's median look forged, a forged one stays far below it.
        low = est[len(est) // 4]
        return {"wall_ms": median(est), "wall_q25_ms": low, "event_ms": said, "round_trip_ms": self.rtt_ms,
                "forged": said < 0.75 * low - (0.1 if self.cuda else _CPU_SLACK_MS)}


class RemoteModel:
    """One ModelNew in the candidate's process, called like a module."""

    def __init__(self, remote: Remote, mid: int, notes: list[str]):
        self.remote, self.id, self.notes = remote, mid, notes

    def call(self, args, poison=False, check=False, ref_aliases=False, plant=None, plain=True) -> Reply:
        return Reply(self.remote.request({"op": "call", "id": self.id, "args": list(args), "poison": poison,
                                          "check": check, "ref_aliases": ref_aliases, "plant": plant,
                                          "plain": plain}))

    def __call__(self, *args):
        return self.call(args).out

    def timed(self, args) -> tuple[float, object]:
        """(the candidate's ms, output); this side's wall time of the request is kept beside it."""
        t0 = time.perf_counter()
        reply = self.call(args)
        wall = (time.perf_counter() - t0) * 1e3
        size = sum(o.numel() * o.element_size() for o in reply.outs or [] if isinstance(o, torch.Tensor))
        self.remote.walls.append((wall - self.remote.overhead_ms(size), reply.ms))
        # NOTE: copied on arrival, outside the timed request: what is checked later is what it returned then,
        # not what its process may write into that memory afterwards.
        outs = [o.clone() for o in reply.outs]
        return reply.ms, outs[0] if len(outs) == 1 else outs

    def train(self, mode: bool = True):
        self.remote.request({"op": "train", "id": self.id, "mode": mode})
        return self

    def named_buffers(self):
        return self.remote.request({"op": "buffers", "id": self.id})["buffers"].items()

    def profile(self, args) -> dict:
        return self.remote.request({"op": "profile", "id": self.id, "args": list(args)})


def limits_for(device: str, memory_gb: float) -> float:
    """The candidate process's address-space limit in GB: none on a GPU (the CUDA driver reserves far more
    address space than it uses), `memory_gb` on the CPU."""
    return 0.0 if device.startswith("cuda") else memory_gb

