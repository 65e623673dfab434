"""The command line: clear one-line errors for bad problems, and compile/explain on the CPU."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tw(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "torchweld", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT)


BAD = {
    "missing.py": None,
    "no_model.py": "import torch\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n",
    "import_error.py": "import not_a_module_at_all\n",
    "syntax.py": "class Model(:\n",
    "not_tensor.py": ("import torch, torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x): return x\n"
                      "def get_inputs(): return ['a string']\ndef get_init_inputs(): return []\n"),
    "init_fails.py": ("import torch, torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, n):\n"
                      "        super().__init__(); raise ValueError('bad size')\n"
                      "def get_inputs(): return [torch.rand(2)]\ndef get_init_inputs(): return [1]\n"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_problem_gives_one_line(name, tmp_path):
    path = tmp_path / name
    if BAD[name] is not None:
        path.write_text(BAD[name])
    proc = tw("compile", path, "-o", tmp_path / "out.py")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("torchweld:") and "unavailable" not in line]
    assert len(lines) == 1 and name in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_compile_without_gpu_says_so(tmp_path):
    out = tmp_path / "s1.py"
    proc = tw("compile", ROOT / "problems/seeds/seed001_conv2d_relu_bias.py", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and "class ModelNew" in out.read_text()
    assert "no CUDA GPU" in proc.stdout


def test_explain_shows_graph_rewrites_and_plan():
    proc = tw("explain", ROOT / "problems/seeds/seed000_convt3d_bias_residual.py")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for part in ("# Captured graph", "# Rewrites", "collect_linear", "# Kernel plan", "k0(", "fma(", "# Decisions"):
        assert part in out


# Each decision the Plan records, in the explain output of a corpus problem that has it.
EXPLAINED = {
    "conv/conv2d_3x3_bn_eval_relu.py": [
        "  v9_lib: site 0; its output is handed on as made",  # convolution layout: handed on channels-last
        "  k0: v9_lib with strides (200704, 1, 3584, 64)",  # the kernel's channels-last build
        "  v9_bias = a view of v9_b",  # the folded bias's view is never made
        "  mode: bn in eval mode",  # the guard checks the norm's mode
        "Written over an operand: none",  # not where a `_cl` build reads tiles
    ],
    "conv/conv1d_dilated_gelu_residual.py": [
        "  v3_lib: site 0; its output is handed on contiguous, as captured",
        "  k0 writes v5 over v3_lib",
        "  v3_bias = a view of p1 (conv.bias)",
        "Channels-last builds: none",
    ],
    "matmul/mlp3d_gelu_tanh_relu.py": [
        "  k1: ways ours, addmm, epilogue; addmm: torch.addmm(p3, v11, v10) then k1 given -0.0 for p3",
        "  v5 = p0.t() (up.weight), laid out (in, out)",
        "  k0 writes v9 over v8_lib",
        "  dtype and device: p1 (up.bias), p3 (down.bias)",
        "Convolution sites: none",
    ],
    "norm/instance_norm1d_tracked_relu.py": [
        "  k1 writes v14 into p2 (norm.running_mean); the copy_ v15 moves nothing",
        "  mode: norm in training mode",
        "CUDA graph: cannot be used: it updates buffers in place",
    ],
    "conv/conv2d_depthwise_5x5_stride2_hardswish.py": [
        "  shape: p0 (conv.weight) (a depthwise kernel is built for it)",
        "CUDA graph: not asked for (--cuda-graph); nothing blocks it",
    ],
}


@pytest.mark.parametrize("name", sorted(EXPLAINED))
def test_explain_shows_each_decision(name, capsys):
    from torchweld.cli import main

    assert main(["explain", str(ROOT / "problems" / name)]) == 0
    out = capsys.readouterr().out
    decisions = out[out.index("# Decisions"):].splitlines()
    missing = [line for line in EXPLAINED[name] if not any(d.startswith(line) for d in decisions)]
    assert not missing, out[out.index("# Decisions"):]


def test_explain_follows_the_options(capsys):
    from torchweld.cli import main

    problem = str(ROOT / "problems" / "conv" / "conv1d_dilated_gelu_residual.py")
    assert main(["explain", problem, "--no-layout-plan", "--cuda-graph"]) == 0
    out = capsys.readouterr().out
    assert "Convolution sites: none (layout planning is off" in out
    assert "CUDA graph: the fast path is captured at its first call and replayed" in out


DATA_DEPENDENT = '''"""A forward whose control flow depends on the data: no graph can be traced."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return torch.relu(y)
        return y * 2.0


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
'''


def test_untraceable_model_still_gets_a_correct_file(tmp_path):
    import torch

    from torchweld.problem import load_module, load_problem

    problem_path = tmp_path / "data_dependent.py"
    problem_path.write_text(DATA_DEPENDENT)
    out = tmp_path / "new.py"
    proc = tw("compile", problem_path, "-o", out)
    assert proc.returncode == 3, proc.stderr
    assert "could not compile" in proc.stderr and "Traceback" not in proc.stderr
    source = out.read_text()
    assert "Nothing fused" in source and "Reason: CaptureError" in source
    problem = load_problem(problem_path)
    module = load_module(out, source, prefix="tw_passthrough_test")
    ref = problem.build_model(0)
    torch.manual_seed(0)
    new = module.ModelNew(*problem.init_inputs())
    assert list(new.state_dict()) == list(ref.state_dict())
    new.load_state_dict(ref.state_dict())
    x = torch.randn(4, 8)
    assert torch.equal(new(x), ref(x))


def test_compile_file_never_fails_on_a_valid_problem(tmp_path):
    from torchweld.pipeline import compile_file

    problem_path = tmp_path / "data_dependent.py"
    problem_path.write_text(DATA_DEPENDENT)
    out = compile_file(problem_path, tmp_path / "new.py")
    assert "class ModelNew" in out.read_text()


def test_varargs_forward_gets_a_passthrough(tmp_path):
    problem_path = tmp_path / "varargs.py"
    problem_path.write_text('"""varargs"""\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n'
                            '    def forward(self, *xs):\n        return torch.relu(xs[0]) + xs[1]\n\n\n'
                            'def get_inputs():\n    return [torch.randn(4, 4), torch.randn(4, 4)]\n\n\n'
                            'def get_init_inputs():\n    return []\n')
    proc = tw("compile", problem_path, "-o", tmp_path / "new.py")
    assert proc.returncode == 3 and "*args" in proc.stderr
    assert "Nothing fused" in (tmp_path / "new.py").read_text()


SMALL = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
         "        return torch.relu(x) * 2\n\n\ndef get_inputs():\n    return [torch.rand(8, 16)]\n\n\n"
         "def get_init_inputs():\n    return []\n")


def test_output_onto_the_problem_file_is_refused(tmp_path, capsys):
    from torchweld.cli import main

    problem = tmp_path / "small.py"
    problem.write_text(SMALL)
    assert main(["compile", str(problem), "-o", str(problem)]) == 2
    assert problem.read_text() == SMALL  # untouched
    assert "would overwrite it" in capsys.readouterr().err


def test_output_into_a_directory(tmp_path):
    from torchweld.cli import main

    problem, outdir = tmp_path / "small.py", tmp_path / "outdir"
    problem.write_text(SMALL)
    outdir.mkdir()
    assert main(["compile", str(problem), "-o", str(outdir)]) == 0
    assert "class ModelNew" in (outdir / "small_new.py").read_text()
    assert main(["compile", str(problem), "-o", str(tmp_path / "fresh") + "/"]) == 0  # a new directory, by its slash
    assert (tmp_path / "fresh" / "small_new.py").exists()


def test_version_and_help_texts(capsys):
    from torchweld import __version__
    from torchweld.cli import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--version"])
    assert done.value.code == 0 and __version__ in capsys.readouterr().out
    helps = {}
    for cmd in ("compile", "explain", "check"):
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, "--help"])
        helps[cmd] = capsys.readouterr().out
    assert "exit codes:" in helps["compile"] and "12" in helps["compile"] and "original forward" in helps["compile"]
    assert "problem file defining Model" in helps["explain"]  # the argument has its text
    assert "(default: 600.0)" in helps["check"]  # defaults shown
