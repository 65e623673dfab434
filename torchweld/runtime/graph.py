"""Replay a ModelNew's fast path as a CUDA graph.

Everything below the `pasted from here` line is pasted into emitted files (which need PyTorch
alone) by emit/runtime.py; above it, what makes this a module of its own.
"""
import torch

# pasted into files compiled with `--cuda-graph` only.
# --- pasted from here ---
def _tw_graphed(module, inputs, state, fast):
    """Run `fast(*inputs, *state)` as a CUDA graph: captured at the first call (after two warm-up
    calls, which build, plan layouts and make the libraries' workspaces), captured again when a
    parameter or buffer has moved or changed in place; each call copies the inputs in, replays, and
    clones the output."""
    try:  # NOTE: with the versions: a weight packed or folded at capture would go stale on an in-place update
        key = tuple((t.data_ptr(), t._version) for t in state)
    except RuntimeError:  # inference tensors (a model built under inference_mode) keep no version: no graph
        return fast(*inputs, *state)
    held = module.__dict__.get("_tw_graph")
    if held is None or held[0] != key:
        for _ in range(2):
            fast(*inputs, *state)
        torch.cuda.current_stream().synchronize()
        static_in = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = fast(*static_in, *state)
        held = module.__dict__["_tw_graph"] = (key, graph, static_in, static_out)
    _, graph, static_in, static_out = held
    for s, t in zip(static_in, inputs):
        if isinstance(t, torch.Tensor):
            s.copy_(t)
    graph.replay()
    if isinstance(static_out, tuple):
        return tuple(o.clone() for o in static_out)
    return static_out.clone()
