"""The runtime helpers an emitted file carries: the code of torchweld/runtime/ modules, pasted."""
from __future__ import annotations

from functools import cache
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[1] / "runtime"
MARKER = "# --- pasted from here ---\n"


@cache
def pasted(module: str) -> str:
    """The part of runtime/<module>.py that goes into an emitted file (below its marker line), stripped."""
    text = (RUNTIME / f"{module}.py").read_text()
    if MARKER not in text:
        raise ValueError(f"torchweld/runtime/{module}.py has no '{MARKER.strip()}' line")
    return text.split(MARKER, 1)[1].strip()
