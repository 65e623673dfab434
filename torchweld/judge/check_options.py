"""The judge's one options dataclass, its outcomes and their exit codes."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

OUTCOMES = ("correct", "wrong", "cheat", "no_build", "runtime_error", "timeout", "no_gpu", "decoy_kernel",
            "no_kernel")
# NOTE: `no_gpu` is no verdict on the candidate: it was checked and built as far as a machine without a
# GPU can, and not run. A bench never keeps it as a result to resume: a run on a GPU judges it again.
NOT_RUN = "no_gpu"
# 2 is the usage / problem-file error code; only the CLI turns outcomes into exit codes.
EXIT_CODES = {"correct": 0, "wrong": 12, "cheat": 13, "no_build": 10, "runtime_error": 11, "timeout": 14,
              "no_gpu": 15, "decoy_kernel": 16, "no_kernel": 17}
USAGE_EXIT = 2


@dataclass(frozen=True)
class CheckOptions:
    """Everything the judge may vary; passed whole from the CLI to the child process (child.py)."""

    timeout_s: float = 600.0
    tolerance: str = "oracle"  # oracle | table | kernelbench
    oracle_factor: float = 4.0  # candidate error may be this many times the reference's own error
    trials: int = 5
    seed: int = 0
    generalize: bool = True
    max_variants: int = 12
    anti_cheat: bool = True
    timing: bool = True
    compile_mode: str = "default"  # default | max-autotune
    timing_runs: int = 30  # at least this many timed runs ...
    timing_min_s: float = 1.0  # ... and at least this long, per timed function
    timing_max_runs: int = 2000
    timing_sets: int = 4  # rotating input sets while timing
    stream_probes: int = 10  # extra calls whose results are read at once (a side-stream race shows up)
    fresh_sets: int = 6  # never-seen input sets timed once each (catches caching by value)
    allow_tf32: bool = False  # the judge's fp32 is strict fp32 unless this says otherwise
    # Only what needs no GPU: import the candidate with its extensions recorded, compile them as
    # load_inline would (judge/offline.py), run nothing. The judge does this by itself where there is no GPU.
    build_only: bool = False
    # Where the bench runs several judges at once, what they share:
    gpu_lock: str | None = None  # a lock file: judges on one GPU take turns through it for the GPU work
    judges_dir: str | None = None  # judges register here; the one timing pauses the others (judge/quiet.py)
    # The problem asks for custom kernels: an answer that defines none is `no_kernel` (the agent's default).
    require_kernel: bool = False
    decoy_share: float = 0.01  # own kernels under this share of the forward's GPU time: `decoy_kernel`
    # Where the judge runs its whole protocol: "cuda", or "cpu" for tests (pure-PyTorch candidates).
    device: str = "cuda"
    candidate_memory_gb: float = 16.0  # the candidate's process's address space, on the CPU only

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "CheckOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})
