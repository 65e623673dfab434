"""The GPU's multiprocessor count sizes the split of long reductions: read from the device where one is
present, an option otherwise (Options.sms), and recorded on each reduce kernel that codegen sizes."""
import torch

from torchweld.options import Options
from torchweld.pipeline import compile_problem
from torchweld.problem import Problem
from torchweld.tiling import SMS, device_sms, layout


def _problem(tmp_path, rows: int, cols: int) -> Problem:
    path = tmp_path / "rowsums.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def forward(self, x):\n        return x.sum(-1)\n\n\n"
                    f"def get_inputs():\n    return [torch.rand({rows}, {cols})]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    from torchweld.problem import load_problem

    return load_problem(path)


def test_few_long_rows_split_only_below_the_gpus_multiprocessors():
    assert layout(64, 1 << 16, 1, 4).split > 1  # 64 rows leave a 132-SM GPU half empty: split
    assert layout(64, 1 << 16, 1, 4, sms=32).split == 1  # 64 rows fill 32 SMs twice over: no split
    assert layout(64, 1 << 16, 1, 4, sms=0) == layout(64, 1 << 16, 1, 4)  # 0: the default target


def test_without_a_gpu_the_target_is_an_h100s():
    if not torch.cuda.is_available():
        assert device_sms() == SMS == 132


def test_the_option_reaches_the_plan_and_the_generated_source(tmp_path):
    problem = _problem(tmp_path, 64, 1 << 16)
    big, small = (compile_problem(problem, Options(sms=n)) for n in (132, 32))
    assert [k.sms for k in big.plan.kernels] == [132] and [k.sms for k in small.plan.kernels] == [32]
    # NOTE: a split reduction writes partial sums to a workspace that a second kernel merges
    assert "ws = torch.empty(" in big.source and "ws = torch.empty(" not in small.source
