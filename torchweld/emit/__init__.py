"""Emit: the standalone ModelNew file (needs PyTorch alone: no torchweld import at run time)."""
from torchweld.emit.module import EmitError, copies_into, emit, emit_passthrough, reusable

__all__ = ["EmitError", "copies_into", "emit", "emit_passthrough", "reusable"]
