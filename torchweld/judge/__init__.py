"""The judge: grade any `ModelNew` against its problem's `Model` (builds, numerics, tricks, timing)."""
from torchweld.judge.options import EXIT_CODES, NOT_RUN, OUTCOMES, CheckOptions
# NOTE: imported here, not on first call: importing the submodule later would rebind `torchweld.judge.check`
# to the module, and `from torchweld.judge import check` would then give a module, not this function.
from torchweld.judge.check import check

__all__ = ["EXIT_CODES", "NOT_RUN", "OUTCOMES", "CheckOptions", "check"]
