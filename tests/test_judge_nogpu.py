"""The judge where nothing may run on a GPU (no GPU, or --build-only): the checks that need none run and are
reported, a build failure is a verdict, the rest is `no_gpu`. Two tests build seed replies with nvcc and g++
(tens of seconds each), under --full-sweep alone (CI's time budget; tests/test_judge_build.py reads build logs
without a compiler); the seeds are read from ../shared/seeds, never copied here."""
from pathlib import Path

import pytest
import torch

from torchweld.judge import CheckOptions, check, offline
from torchweld.judge.candidate_process import Runner
from torchweld.judge.check_cli import main
from torchweld.judge.layout import cxx_path, nvcc_path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "judge"
PROBLEM = FIX / "problem_relu_bias.py"
# NOTE: ../shared/seeds beside the checkout; a worktree nested deeper finds it further up.
SEEDS = next((d / "shared" / "seeds" for d in ROOT.parents if (d / "shared" / "seeds").is_dir()), None)
ONLY = CheckOptions(build_only=True, timeout_s=1200)

needs_seeds = pytest.mark.skipif(SEEDS is None, reason="../shared/seeds (the recorded replies) is not here")
needs_compilers = pytest.mark.skipif(not (nvcc_path() and cxx_path()), reason="needs nvcc and a C++ compiler")

PLAIN = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def seed(prefix: str) -> Path:
    return next(SEEDS.glob(f"{prefix}_*.txt"))


def write(tmp_path, text: str, name: str = "cand.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@needs_seeds
@needs_compilers
def test_seed002_does_not_build_and_the_message_names_the_function_and_its_line(tmp_path, request):
    if not request.config.getoption("--full-sweep"):
        pytest.skip("a real build against PyTorch's headers (about 40 s): under --full-sweep")
    res = check(ROOT / "problems" / "seeds" / "seed002_convt3d.py", seed("002"), ONLY)
    assert res["outcome"] == "no_build"
    assert res["message"] == ("extension conv_transpose3d_cuda failed to build: main.cpp:6: error: "
                              "'conv_transpose3d_forward' was not declared in this scope "
                              "(names: conv_transpose3d_forward)")
    details = "\n".join(res["details"])
    assert 'functions=["conv_transpose3d_forward"]' in details  # the candidate's line the binding came from
    assert "never declared in cpp_sources" in details and "declare it in cpp_sources" in details
    assert "(reply line " in details
    steps = res["build"]["extensions"][0]["steps"]
    assert [(s["file"], s["status"]) for s in steps][0] == ("main.cpp", "failed")


def test_an_empty_file_says_so(tmp_path):
    for name in ("empty.py", "empty.md"):
        res = check(PROBLEM, write(tmp_path, "\n  \n", name))
        assert res["outcome"] == "no_build" and res["message"].endswith(": the file is empty")


def test_a_file_without_modelnew_says_so_with_its_static_findings(tmp_path):
    res = check(PROBLEM, write(tmp_path, "import torch\ns = torch.cuda.Stream()\n\nclass Model2:\n    pass\n"))
    assert res["outcome"] == "no_build"
    assert res["message"] == "the candidate defines no class ModelNew (the name appears nowhere in it)"
    assert [f["rule"] for f in res["static"]] == ["other_stream"]


def test_a_syntax_error_is_found_without_a_child(tmp_path):
    res = check(PROBLEM, write(tmp_path, "class ModelNew:\n    def f(:\n        pass\n"))
    assert res["outcome"] == "no_build" and res["message"].startswith("syntax error at line 2")
    assert res["static"][0]["rule"] == "syntax"


def test_a_plain_modelnew_imports_and_is_not_run(tmp_path, capsys):
    code = main(["check", str(PROBLEM), str(write(tmp_path, PLAIN)), "--build-only"])
    captured = capsys.readouterr()
    assert code == 15 and "NO_GPU" in captured.out
    assert "imports; nothing to build (no load_inline or load); not run: " in captured.out
    # said up front, in one line, before anything is judged
    assert captured.err.count("\n") == 1 and "not run" in captured.err


def test_triton_is_not_built(tmp_path):
    source = ("import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n    pass\n\n"
              "class ModelNew(torch.nn.Module):\n    pass\n")
    res = check(PROBLEM, write(tmp_path, source), ONLY)
    assert res["outcome"] == "no_gpu" and "not built: Triton needs a GPU" in res["message"]


def test_an_import_that_fails_is_no_build_with_its_line(tmp_path):
    res = check(PROBLEM, write(tmp_path, "import torch\nscale = undefined_name * 2\nclass ModelNew:\n    pass\n"), ONLY)
    assert res["outcome"] == "no_build" and "NameError" in res["message"]
    assert "candidate line 2: scale = undefined_name * 2" in res["details"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU only: with one, the import works")
def test_an_import_that_needs_a_gpu_is_not_run(tmp_path):
    res = check(PROBLEM, write(tmp_path, "import torch\nw = torch.ones(3).cuda()\nclass ModelNew:\n    pass\n"))
    assert res["outcome"] == "no_gpu" and "its import needs a GPU" in res["message"]
    assert "not run: no GPU" in res["message"] and "candidate line 2: w = torch.ones(3).cuda()" in res["details"]


def test_an_extension_built_in_the_constructor_is_recorded(tmp_path, monkeypatch):
    """Built when ModelNew is constructed, not at import: the model is constructed on the CPU to record it."""
    source = ("import torch\nfrom torch.utils.cpp_extension import load_inline\n\nclass ModelNew(torch.nn.Module):\n"
              "    def __init__(self, *args):\n        super().__init__()\n"
              "        self.ext = load_inline('late_ext', 'int f();', functions=['f'])\n")
    seen = []
    monkeypatch.setattr(offline, "build", lambda ext, src, folder, deadline: seen.append(ext) or offline.Built(ext, ()))
    # NOTE: the build stage runs in the candidate's process; here its request is answered in this one.
    got = Runner(None, "cpu").op_offline({"problem_path": str(PROBLEM), "source_path": str(write(tmp_path, source)),
                                          "opts": CheckOptions(build_only=True).to_json(), "why": "--build-only",
                                          "elapsed_s": 0.0, "log_dir": str(tmp_path)})["result"]
    assert [(e.name, e.line) for e in seen] == [("late_ext", 7)]
    assert got["outcome"] == "no_gpu" and got["message"].startswith("builds; not run")
