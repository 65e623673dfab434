"""The judge: grade any `ModelNew` against its problem's `Model` (builds, numerics, tricks, timing)."""
from torchweld.judge.check_options import EXIT_CODES, NOT_RUN, OUTCOMES, CheckOptions
from torchweld.judge.parent import check

__all__ = ["EXIT_CODES", "NOT_RUN", "OUTCOMES", "CheckOptions", "check"]
