"""bench/kernel_bench.py keeps a library built from the same source and flags, and rebuilds when either changes."""
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from kernel_bench import build_each  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
FLAGS = ["-shared", "-Xcompiler", "-fPIC"]
SOURCE = 'extern "C" int tw_one() { return 1; }\n'


def test_a_dry_run_build_is_kept_for_the_timed_run_and_rebuilt_when_flags_change(tmp_path):
    so = build_each({"one": SOURCE}, tmp_path, FLAGS, 1)["one"]
    built = so.stat().st_mtime_ns
    assert build_each({"one": SOURCE}, tmp_path, FLAGS, 1)["one"].stat().st_mtime_ns == built
    again = build_each({"one": SOURCE}, tmp_path, [*FLAGS, "-O2"], 1)["one"].stat().st_mtime_ns
    assert again != built
    assert build_each({"one": SOURCE + "// v2\n"}, tmp_path, [*FLAGS, "-O2"], 1)["one"].stat().st_mtime_ns != again
