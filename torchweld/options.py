"""Options: everything the compiler can be asked to do differently, passed whole to every stage."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Precision(str, Enum):
    """How fp32 data may be computed: the reference's strict fp32, or with TF32 matrix units allowed."""

    FP32 = "fp32"  # fp32 stays fp32 wherever the reference has it
    TF32 = "tf32"  # cuBLAS/cuDNN may use TF32 for fp32 data (said in the file's header)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Options:
    """Everything the pipeline can be asked to do differently."""

    dump: bool = False  # keep the graph after every pass (for `explain`)
    seed: int = 0  # RNG seed for building the model whose graph is captured
    precision: Precision = Precision.FP32
    layout_plan: bool = True  # convolutions run in the layout measured fastest at their first call
    cuda_graph: bool = False  # replay the fast path as a CUDA graph (terms in the file's header)
    sms: int = 0  # multiprocessors of the target GPU (sizes the split of long reductions); 0: the current
    #               device's where one is present, else an H100/H200's
    gemm: bool = False  # our GEMM kernel at each GEMM site, checked and timed against the library's (unverified on a GPU)
    conv_ours: bool = False  # our implicit-GEMM convolution at each convolution site, checked and timed against cuDNN's

    def __post_init__(self):
        try:  # NOTE: a plain string ("tf32", from the CLI or a caller) is accepted and normalised
            object.__setattr__(self, "precision", Precision(self.precision))
        except ValueError:
            choices = ", ".join(p.value for p in Precision)
            raise ValueError(f"precision must be one of {choices}, not {self.precision!r}") from None

    @property
    def tf32(self) -> bool:
        return self.precision is Precision.TF32
