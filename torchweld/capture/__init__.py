"""Capture: an nn.Module and example inputs -> the aten-level IR graph (make_fx on fake tensors)."""
from torchweld.capture.trace import CaptureError, capture, device_neutral

__all__ = ["CaptureError", "capture", "device_neutral"]
