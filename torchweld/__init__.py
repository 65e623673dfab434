"""torchweld: compile a PyTorch Model into a standalone fused-CUDA ModelNew, and judge any ModelNew."""
__version__ = "0.1.0"
