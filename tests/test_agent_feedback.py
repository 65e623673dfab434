"""Judge results -> feedback the model can act on; build errors located in the reply; replies without code."""
import json
from pathlib import Path

import pytest

from agent_replay import seed_reply
from torchweld.agent import feedback, prompt
from torchweld.agent.client import Reply
from torchweld.agent.locate import locate, mentions
from torchweld.agent.loop import examine, unclosed_at
from torchweld.judge.extract import extract_source

FIX = Path(__file__).resolve().parent / "fixtures"
VERDICTS = json.loads((FIX / "agent" / "seed002_verdicts.json").read_text())
needs_seeds = pytest.mark.skipif(not seed_reply("002"), reason="../shared/seeds (the recorded replies) is not here")

CODE = '''import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void k(float* x) {
    x[threadIdx.x] += 1;
}
torch::Tensor run(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }
"""
cpp_src = "torch::Tensor run(torch::Tensor x);"
ext = load_inline(name="ext", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["run"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)
'''


def _reply(text, finish="stop"):
    return Reply(text, finish, None, None, 0.0, 1)


@needs_seeds
def test_seed002_build_failure_names_the_undeclared_function_and_its_line():
    code = extract_source(seed_reply("002"))[0]
    text = feedback.render(VERDICTS["seed002"], code)
    assert text.startswith("It did not build:") and "conv_transpose3d_forward" in text
    lines = code.splitlines()
    at = next(i for i, ln in enumerate(lines, 1) if "functions=" in ln)
    assert f"main.cpp:6 is your line {at}: `{lines[at - 1].strip()}`" in text
    assert "must be declared there" in text  # what to do about it: declare it in cpp_sources
    define = next(i for i, ln in enumerate(lines, 1) if ln.startswith("std::tuple<torch::Tensor> conv_transpose3d_forward"))
    assert f"line {define} (in the string conv_transpose3d_source)" in text
    assert text.rstrip().endswith(prompt.AGAIN)


def test_wrong_names_each_variant_and_its_error():
    text = feedback.render(VERDICTS["seed002_mended"], "")
    assert "right on all 5 trials" in text
    assert "stride=2: relative error 2.55" in text and "padding=1: relative error 0.66" in text
    assert "right on: batch=1, batch=3" in text and "every valid value" in text


def test_wrong_on_a_trial_gives_index_and_errors():
    result = {"outcome": "wrong", "message": "wrong output on trial 1", "correctness": [
        {"inputs": "trial 1 (seed 1)", "ok": False, "max_abs": 0.73, "rel": 0.41, "first_bad": [[0, 3, 17, 9]],
         "n_bad": 900, "why": "error vs float64 truth 4.1e-01"}], "generalization": []}
    text = feedback.render(result)
    assert "trial 1 (seed 1): max abs error 0.73, relative error 0.41, first bad index [0, 3, 17, 9], 900 elements off" in text


def test_cheat_gives_the_check_and_its_evidence():
    result = json.loads((FIX / "judge" / "result_sample.json").read_text())
    text = feedback.render(result)
    assert "check output_reuse: the output is the same storage as the previous call's output" in text
    assert "line 12: other_stream" in text and text.rstrip().endswith(prompt.AGAIN)


def test_correct_gives_times_profile_and_asks_for_speed():
    result = {"outcome": "correct", "correctness": [{}] * 5, "generalization": [{}] * 10,
              "timing": {"eager_ms": 2.0, "compile_ms": 1.5, "candidate_ms": 1.0, "speedup_vs_eager": 2.0,
                         "speedup_vs_compile": 1.5},
              "profile": [{"name": "conv_kernel", "ms": 0.8}, {"name": "fused_add", "ms": 0.1}]}
    text = feedback.render(result)
    assert "Correct: right on 5 trials and 10 other" in text
    assert "yours 1.0000 ms; eager PyTorch 2.0000 ms (2.00x); torch.compile 1.5000 ms (1.50x)" in text
    assert "conv_kernel: 0.8000 ms" in text and text.rstrip().endswith(prompt.FASTER)


def test_runtime_error_and_timeout():
    text = feedback.render({"outcome": "runtime_error", "message": "during correctness: RuntimeError: CUDA error: "
                            "an illegal memory access was encountered", "details": ["stderr: boom"]})
    assert "failed at run time" in text and "illegal memory access" in text and "stderr: boom" in text
    assert "hang" in feedback.render({"outcome": "timeout", "message": "no result within 600 s (still in timing)"})


def test_locate_cuda_line():
    where = locate(CODE, "cuda.cu:6: error: identifier x", "ext")  # 3 include lines, then cuda_src's lines
    assert where.text == "x[threadIdx.x] += 1;" and CODE.splitlines()[where.line - 1].strip() == where.text
    where = locate(CODE, "main.cpp:2: error: y")  # line 1 is torch/extension.h, then cpp_src
    assert where.text.startswith("cpp_src =")
    where = locate(CODE, "main.cpp:4: error: z")  # after PYBIND11_MODULE(...) {: the binding of functions[0]
    assert where.text == 'functions=["run"])' and "'run'" in where.note
    assert locate(CODE, "no reference here") is None and locate("def (:", "main.cpp:1") is None
    assert [w.line for w in mentions(CODE, "run")][:2] == [8, 10]


def test_reply_without_code():
    code, own, text = examine(_reply("I would fuse the ReLU into the convolution."))
    assert code is None and own == "no_code" and "no fenced code block" in text
    code, own, text = examine(_reply("```cpp\nint x;\n```\n```python\nprint(1)\n```"))
    assert own == "no_code" and "2 fenced block(s), 1 of them python, and none defines class ModelNew" in text


def test_truncated_code_block():
    cut = "Here it is:\n```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x +"
    code, own, text = examine(_reply(cut, "length"))
    assert own == "truncated" and "hit the length limit" in text and "`return x +`" in text
    code, own, text = examine(_reply(cut, "stop"))
    assert own == "truncated" and "never closed" in text
    assert unclosed_at(cut) == 3 and unclosed_at(cut + "\n```") is None
    code, own, _ = examine(_reply("```python\nclass ModelNew:\n    pass\n```\nand then the explanation was cu", "length"))
    assert own is None and "class ModelNew" in code  # the code itself is whole: it is judged


@needs_seeds
@pytest.mark.parametrize("seed", ["000", "001", "002", "004"])
def test_seed_replies_have_whole_code(seed):
    code, own, _ = examine(_reply(seed_reply(seed)))
    assert own is None and "class ModelNew" in code


def test_first_prompts():
    src = (FIX / "judge" / "problem_relu_bias.py").read_text()
    blank = prompt.first_prompt(src)
    assert src.strip() in blank and "load_inline" in blank and "```python" in blank and "torchweld" not in blank
    start = prompt.Start(compiled="class ModelNew: pass", plan="def forward(...):\n    v = k0(x)")
    text = prompt.first_prompt(src, start)
    assert "class ModelNew: pass" in text and "v = k0(x)" in text and "Beat it" in text
    assert len(prompt.prompt_version()) == 12


def test_compiled_start_carries_the_plan():
    from torchweld.problem import load_problem

    start = prompt.compiled_start(load_problem(FIX / "judge" / "problem_relu_bias.py"))
    assert "class ModelNew" in start.compiled and start.plan.startswith("def forward(")
