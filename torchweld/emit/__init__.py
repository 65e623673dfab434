"""Emit: print the Plan as the standalone ModelNew file (needs PyTorch alone: no torchweld import at run time)."""
from torchweld.emit.module import emit, emit_passthrough
from torchweld.emit.source import EmitError

__all__ = ["EmitError", "emit", "emit_passthrough"]
