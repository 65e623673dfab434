"""Plan: partition the graph into library calls and fused kernels, and decide how each runs."""
from torchweld.plan.describe import describe
from torchweld.plan.partition import NEVER_FUSED, can_fuse, plan

__all__ = ["NEVER_FUSED", "can_fuse", "describe", "plan"]
