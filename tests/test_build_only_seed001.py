"""The judge without a GPU builds seed 001's reply (a load_inline extension: C++ and CUDA) and runs nothing.

NOTE: its own module, apart from tests/test_judge_nogpu.py: the build is the suite's longest test, and the test
runner hands out whole modules, so here it runs beside the rest instead of after it. It runs under --full-sweep
alone: a minute and a half of the CI machine's two cores for one build, where CI's time budget is eight minutes
(seed 002's build, which fails, still runs in CI through the same build stage)."""
import json

import pytest

from test_judge_nogpu import ROOT, needs_compilers, needs_seeds, seed

from torchweld.judge import EXIT_CODES
from torchweld.judge.check_cli import main


@needs_seeds
@needs_compilers
def test_seed001_builds_and_is_not_run(tmp_path, capsys, request):
    if not request.config.getoption("--full-sweep"):
        pytest.skip("the longest build of the suite: under --full-sweep")
    code = main(["check", str(ROOT / "problems" / "seeds" / "seed001_conv2d_relu_bias.py"), str(seed("001")),
                 "--build-only", "--json", "--timeout", "1200"])
    res = json.loads(capsys.readouterr().out)
    assert code == EXIT_CODES["no_gpu"] == 15
    assert res["outcome"] == "no_gpu" and res["message"].startswith("builds; not run")
    (ext,) = res["build"]["extensions"]
    assert ext["name"] == "fused_relu_add" and [s["status"] for s in ext["steps"]] == ["ok", "ok"]
    assert any("its symbols resolve" in d for d in res["details"])
    assert res["correctness"] == [] and res["timing"] is None
