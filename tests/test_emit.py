"""The emitted ModelNew file: its text (substrings and golden files) and its behaviour on the CPU."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from torchweld.pipeline import compile_problem
from torchweld.problem import load_module, load_problem

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "problems" / "seeds"
GOLDEN = Path(__file__).parent / "golden"


def _emit(path: Path) -> str:
    return compile_problem(load_problem(path)).source


@pytest.mark.parametrize("stem", ["seed000_convt3d_bias_residual", "seed001_conv2d_relu_bias"])
def test_golden(stem, request):
    """A refactor that changes no behaviour reproduces these files byte for byte."""
    source = _emit(SEEDS / f"{stem}.py")
    golden = GOLDEN / f"{stem}_new.py"
    if request.config.getoption("--update-golden"):
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(source)
    assert source == golden.read_text()


def test_seed000_file_says_what_it_does():
    src = _emit(SEEDS / "seed000_convt3d_bias_residual.py")
    assert src.startswith('"""torchweld: ModelNew for seed000')
    assert "Fused: 3 pointwise ops into 1 CUDA kernel" in src  # the conv's bias add, then two fmas
    assert "aten.convolution.default" in src and "In libraries" in src
    assert "load_inline" in src and "no_implicit_headers" in src
    assert "torch/extension.h" not in src  # the CUDA source is free of PyTorch headers
    assert "tw_vec<float, 4>" in src  # 16-byte vector loads and stores
    assert "_tw_conv(self, 0, x, p1, None," in src  # bias joins the kernel
    assert "p1 = self._modules['conv_transpose']._parameters['weight']" in src
    assert "fmaf(v4, 2.0f, p0)" in src and "cudaGetLastError" in src
    assert "current_stream" in src
    assert "import torchweld" not in src and "from torchweld" not in src
    ast.parse(src)


def test_same_constructor_and_weights(tmp_path):
    problem = load_problem(SEEDS / "seed001_conv2d_relu_bias.py")
    path = tmp_path / "new.py"
    path.write_text(compile_problem(problem).source)
    module = load_module(path, path.read_text(), prefix="tw_emit_test")
    init = problem.init_inputs()
    torch.manual_seed(7)
    ref = problem.model_cls(*init)
    torch.manual_seed(7)
    new = module.ModelNew(*init)
    assert list(ref.state_dict()) == list(new.state_dict())
    for (k, a), b in zip(ref.state_dict().items(), new.state_dict().values()):
        assert torch.equal(a, b), k
    new.load_state_dict(ref.state_dict())
    ref.load_state_dict(new.state_dict())


def test_cpu_inputs_take_the_general_path(tmp_path):
    """No GPU: forward runs the original code, so the file is importable and right anywhere."""
    problem = load_problem(ROOT / "problems" / "broadcast" / "channel_affine_relu.py")
    path = tmp_path / "new.py"
    path.write_text(compile_problem(problem).source)
    module = load_module(path, path.read_text(), prefix="tw_emit_test")
    ref = problem.build_model(0)
    torch.manual_seed(0)
    new = module.ModelNew(*problem.init_inputs())
    new.load_state_dict(ref.state_dict())
    x = [t[..., :3].contiguous() if t.dim() else t for t in problem.inputs()]
    with torch.no_grad():
        assert torch.allclose(new(*x), ref(*x))


def test_fp16_problem_emits_half_loads():
    src = _emit(ROOT / "problems" / "lowp" / "conv2d_silu_bias_fp16.py")
    assert "__half" in src and "tw_vec<__half, 8>" in src and "torch.float16" in src


@pytest.mark.parametrize("stem", ["seed000_convt3d_bias_residual", "seed001_conv2d_relu_bias"])
def test_judge_static_scan_finds_nothing_in_our_files(stem):
    """Our own output raises none of the judge's static flags (no 16-bit code on fp32, no fallback)."""
    from torchweld.judge.static import scan

    path = SEEDS / f"{stem}.py"
    findings = scan(_emit(path), path.read_text())
    assert not findings, [f.to_dict() for f in findings]


SCALAR_INPUT = '''"""A forward that takes a Python number between two tensors."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, scale, y):
        return torch.relu(x * scale) + y


def get_inputs():
    return [torch.randn(8, 16), 2.5, torch.randn(8, 16)]


def get_init_inputs():
    return []
'''


def test_number_inputs_are_guarded_by_value(tmp_path):
    """A number is traced as a constant: another value must take the general path, never the kernel."""
    path = tmp_path / "scalar_input.py"
    path.write_text(SCALAR_INPUT)
    src = compile_problem(load_problem(path)).source
    assert "scale != 2.5" in src and "scale.shape" not in src
    module = load_module(tmp_path / "new.py", src, prefix="tw_emit_test")
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    assert torch.equal(module.ModelNew()(x, 3.0, y), torch.relu(x * 3.0) + y)


def test_guard_covers_parameters_and_wrappers_stay_short():
    """Forward's guard checks every parameter a kernel reads (a folded bias through its view too),
    so the per-kernel wrappers only lay operands out: no per-call check function on the hot path."""
    src = _emit(SEEDS / "seed000_convt3d_bias_residual.py")
    guard = src[src.index("    def forward"):src.index("return self._tw_general")]
    assert "p2 = self._modules['conv_transpose']._parameters['bias']" in guard
    assert "p0 = self._parameters['bias']" in guard
    for p in ("p0", "p2"):
        assert f"{p}.dtype != torch.float32 or {p}.get_device() != x.get_device()" in guard
    assert "p1.dtype" not in guard  # the weight is read by cuDNN only, which checks it itself
    wrapper = src[src.index("def _k0("):src.index("class ModelNew")]
    assert "_tw_check" not in wrapper and "torch.empty_like(a_v4_lib, memory_format=torch.contiguous_format)" in wrapper
    assert "if err:" in wrapper


def test_convolutions_get_layout_planning_unless_turned_off():
    from torchweld.pipeline import Options

    problem = load_problem(ROOT / "problems" / "conv" / "conv2d_glu.py")
    src = compile_problem(problem).source
    assert "= _tw_conv(self, 0, x, p0, p1," in src and "def _tw_pick(" in src
    assert "Layout: each convolution runs in NCHW or channels-last" in src
    off = compile_problem(problem, Options(layout_plan=False)).source
    assert "_tw_conv" not in off and "torch.convolution(x, p0, p1," in off
    plain = _emit(ROOT / "problems" / "matmul" / "linear_gelu_tanh.py")
    assert "_tw_conv" not in plain and "Layout:" not in plain  # no convolution: nothing to plan


def test_precision_tf32_is_stated_and_scoped():
    from torchweld.pipeline import Options

    problem = load_problem(ROOT / "problems" / "matmul" / "linear_gelu_tanh.py")
    src = compile_problem(problem, Options(precision="tf32")).source
    assert "Precision: tf32 (asked for)" in src
    assert "_tw_was = _tw_tf32((True, True))" in src and "finally:\n            _tw_tf32(_tw_was)" in src
    default = compile_problem(problem).source
    assert "_tw_tf32" not in default and "no TF32 is enabled here" in default
    with pytest.raises(Exception, match="precision must be one of"):
        compile_problem(problem, Options(precision="fp8"))


def test_glu_is_traced_as_two_views_and_one_kernel():
    result = compile_problem(load_problem(ROOT / "problems" / "conv" / "conv2d_glu.py"))
    assert "aten.glu" not in result.source
    (k,) = result.plan.kernels
    ops = [result.plan.graph.by_name()[m].op for m in k.nodes]
    assert ops == ["sigmoid", "mul"]
    assert result.source.count("torch.ops.aten.slice.Tensor(v3, 1,") == 2


def test_cuda_graph_option_states_its_terms_and_refuses_in_place_updates():
    from torchweld.pipeline import Options

    src = compile_problem(load_problem(ROOT / "problems" / "reduce" / "linear_center_rows.py"),
                          Options(cuda_graph=True)).source
    assert "return _tw_graphed(self, (x,), (p0, p1), self._tw_fast)" in src
    assert "def _tw_fast(self, x, p0, p1):" in src and "CUDA graph (asked for)" in src
    bn = compile_problem(load_problem(ROOT / "problems" / "norm" / "conv2d_batchnorm_relu.py"),
                         Options(cuda_graph=True)).source
    assert "_tw_graphed" not in bn and "CUDA graph: asked for but not used: it updates buffers in place" in bn


BN_EVAL = '''"""Batch norm in eval mode after an add: pointwise, its (C,) parameters viewed as (C, 1, 1)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(8).eval()

    def forward(self, x, y):
        return torch.relu(self.bn(x + y))


def get_inputs():
    return [torch.randn(2, 8, 5, 5), torch.randn(2, 8, 5, 5)]


def get_init_inputs():
    return []
'''


def test_views_of_parameters_read_only_by_kernels_are_not_made(tmp_path):
    """`p.view(C, 1, 1)` is the same memory as `p`: the kernel gets `p` and forward makes no view; so
    for a folded bias (`_tw_fold`'s result) that the kernel adds."""
    path = tmp_path / "bn_eval.py"
    path.write_text(BN_EVAL)
    src = compile_problem(load_problem(path)).source
    forward = src[src.index("    def forward"):src.index("    def _tw_general")]
    assert ".view(" not in forward
    assert "_k0(p3, p0, x, y, p2, p1)" in forward
    src = _emit(ROOT / "problems" / "conv" / "conv2d_resnet_downsample_shortcut.py")
    forward = src[src.index("    def forward"):src.index("    def _tw_general")]
    assert ".view(" not in forward
    assert "_k0(v15_lib, v15_b, v27_lib, v27_b)" in forward


def test_other_constructor_arguments_take_the_general_path(tmp_path):
    """Kernels hold the captured configuration (a stride, a threshold): a ModelNew built with other
    arguments must run the original forward even on inputs of the captured shape."""
    problem = load_problem(ROOT / "problems" / "conv" / "conv3d_strided_elu_threshold.py")
    src = compile_problem(problem).source
    assert "or x.shape[1:] != (16, 16, 48, 48)" in src and "if (not self._tw_same_init" in src  # the batch: a runtime size
    module = load_module(tmp_path / "new.py", src, prefix="tw_emit_init")
    init = problem.init_inputs()
    assert module.ModelNew(*init)._tw_same_init
    other = list(init)
    other[-1] = 0.3  # another threshold
    assert not module.ModelNew(*other)._tw_same_init
    other = list(init)
    other[3] = 1  # another stride
    assert not module.ModelNew(*other)._tw_same_init


def test_emit_prints_the_plans_decisions():
    """emit decides nothing: a plan whose decisions are taken away prints a file without them."""
    from dataclasses import replace

    from torchweld.emit import emit

    problem = load_problem(ROOT / "problems" / "matmul" / "mlp3d_gelu_tanh_relu.py")
    result = compile_problem(problem)
    plan = result.plan
    assert plan.written_over and plan.packed_weights and plan.timed_gemm_sites
    for made in ("is read here alone", "_tw_pack(self, ", "_tw_lt(self, "):
        assert made in result.source
    bare = emit(replace(plan, written_over={}, packed_weights={}, gemm_sites={}), problem.source, problem.name)
    assert "is read here alone" not in bare and "_tw_pack" not in bare and "_tw_lt" not in bare
    assert "v5 = p0.t()" in bare and "v9, = _k0(v8_lib, p1)" in bare  # the transpose made, the kernel called
    ast.parse(bare)


def test_emit_imports_no_decision():
    """emit/ reads the Plan's decisions; it imports none of the functions that make them."""
    decisions = {"partition", "plan", "conv_layouts", "conv_sites", "gemm_sites", "packed_weights", "written_over",
                 "overwrites", "written_into", "elided_views", "guard", "kernel_params", "norm_modes", "graph_blockers"}
    imported = set()
    for path in (ROOT / "torchweld" / "emit").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchweld.plan"):
                imported |= {a.name for a in node.names}
    assert imported and not imported & decisions, imported & decisions
