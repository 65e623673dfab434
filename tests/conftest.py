"""Shared test helpers: the repository root on sys.path and small model builders."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/ from the compiler")
    parser.addoption("--full-sweep", action="store_true",
                     help="the emulator sweeps run every case on every path (by default each case on one, in turn)")
