"""The judge: grade any `ModelNew` against its problem's `Model` (builds, numerics, tricks, timing)."""
from torchweld.judge.options import EXIT_CODES, OUTCOMES, CheckOptions

__all__ = ["EXIT_CODES", "OUTCOMES", "CheckOptions", "check"]


def check(problem_path, candidate_path, opts: CheckOptions | None = None) -> dict:
    """Grade `candidate_path` against `problem_path`; see `torchweld.judge.parent.check`."""
    from torchweld.judge.parent import check as _check

    return _check(problem_path, candidate_path, opts or CheckOptions())
