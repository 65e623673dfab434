"""Per-channel ops after a convolution folded into its weight and bias (torchweld/conv_fold.py): where the
rewrite fires and where it must not, the folded graph against the captured one, and the emitted file on
the CPU (kernels on the emulator of tests/emulator.py, convolutions in PyTorch) against eager, folding
again after load_state_dict and in-place updates of the statistics."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from emulator import GXX, emulated_model, write_problem
from helpers import Fn
from torchweld.capture import capture
from torchweld.simplify.conv_fold import FOLD
from torchweld.interp import run_graph
from torchweld.pipeline import Options, compile_problem
from torchweld.problem import load_problem
from torchweld.simplify import simplify

SOURCE = '''"""Fold test model."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {conv}
        {bn}
        self.shift = nn.Parameter(torch.randn({C}, 1{ones}))
        for m in self.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                if m.affine:
                    m.weight.data.uniform_(0.5, 1.5)
                    m.bias.data.normal_(0, 0.5)
                m.running_mean.normal_(0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        self.to(torch.{dtype})
        self.eval()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn({shape}, dtype=torch.{dtype})]


def get_init_inputs():
    return []
'''
# name: (conv, bn, expr, input shape, output channels)
CASES = {
    "conv2d_bn_relu": ("self.conv = nn.Conv2d(4, 6, 3, padding=1, bias=False)", "self.bn = nn.BatchNorm2d(6)",
                       "torch.relu(self.bn(self.conv(x)))", (2, 4, 9, 7), 6),
    "conv2d_bias_bn_alone": ("self.conv = nn.Conv2d(4, 6, 3, stride=2)", "self.bn = nn.BatchNorm2d(6, eps=1e-3)",
                             "self.bn(self.conv(x))", (2, 4, 9, 9), 6),
    "convt2d_groups_bn_silu": ("self.conv = nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2)",
                               "self.bn = nn.BatchNorm2d(6)", "F.silu(self.bn(self.conv(x)))", (2, 4, 5, 6), 6),
    "conv3d_bn_plain_scale_shift": ("self.conv = nn.Conv3d(3, 5, 3, padding=1)",
                                    "self.bn = nn.BatchNorm3d(5, affine=False)",
                                    "self.bn(self.conv(x)) * 2.5 + self.shift", (2, 3, 4, 5, 6), 5),
    "conv1d_param_scale_div": ("self.conv = nn.Conv1d(4, 6, 3, bias=False)",
                               "self.gamma = nn.Parameter(torch.rand(6, 1) + 0.5)",
                               "self.conv(x) * self.gamma / 3.0 - 1.0", (3, 4, 17), 6),
    "dwconv2d_bn_relu6": ("self.conv = nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False)",
                          "self.bn = nn.BatchNorm2d(6)", "F.relu6(self.bn(self.conv(x)))", (2, 6, 9, 10), 6),
    "dwconv1d_causal_bn_silu": ("self.conv = nn.Conv1d(6, 6, 4, padding=3, groups=6)", "self.bn = nn.BatchNorm1d(6)",
                                "F.silu(self.bn(self.conv(x)[..., :x.shape[-1]]))", (2, 6, 33), 6),
    "conv2d_scale_alone": ("self.conv = nn.Conv2d(4, 6, 3, bias=False)", "pass", "self.conv(x) * 0.5", (2, 4, 7, 9), 6),
    "conv2d_bn_residual": ("self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)", "self.bn = nn.BatchNorm2d(4)",
                           "self.bn(self.conv(x)) + x", (2, 4, 8, 8), 4),
}


def _source(name: str, dtype: str = "float32") -> str:
    conv, bn, expr, shape, c = CASES[name]
    return SOURCE.format(conv=conv, bn=bn, expr=expr, shape=", ".join(map(str, shape)), dtype=dtype, C=c,
                         ones=", 1" * (len(shape) - 3))


def _problem(tmp_path, name: str, dtype: str = "float32"):
    path = write_problem(tmp_path, f"fold_{name}_{dtype}", _source(name, dtype))
    namespace: dict = {}
    exec(path.read_text(), namespace)
    return path, namespace


def _graphs(model: nn.Module, x: torch.Tensor):
    g = capture(model, [x])
    return g, simplify(g)


def _folds(graph) -> list:
    return [n for n in graph.nodes if n.op == FOLD]


@pytest.mark.parametrize("name", list(CASES))
def test_folded_graph_matches_the_captured_one(tmp_path, name):
    """The rewrite fires, nothing of the batch norm is left per element, and the folded graph (with the
    emitted file's own fold code) computes what the captured graph computes."""
    _, ns = _problem(tmp_path, name)
    torch.manual_seed(0)
    model = ns["Model"]()
    x = ns["get_inputs"]()[0]
    captured, folded = _graphs(model, x)
    (fold,) = _folds(folded)
    assert not any(n.op in ("rsqrt", "sub") for n in folded.nodes)
    assert any(line.startswith("fold_conv_affine:") for line in folded.log)
    if "causal" in name:  # the crop folds into the depthwise kernel first, then the batch norm into its weights
        assert any(line.startswith("fold_depthwise_crop:") for line in folded.log)
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    with torch.no_grad():
        want = run_graph(captured, state, [x])
        got = run_graph(folded, state, [x])
        eager = model(x)
    assert torch.allclose(want, eager, atol=1e-6, rtol=1e-6)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()


class ConvBN(nn.Module):
    def __init__(self, other_reader=False, relu_between=False, scale=None):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.other_reader, self.relu_between, self.scale = other_reader, relu_between, scale

    def forward(self, x):
        y = self.conv(x)
        if self.scale is not None:
            return torch.relu(y * self.scale)
        z = self.bn(torch.relu(y) if self.relu_between else y)
        return z + y if self.other_reader else torch.relu(z)


@pytest.mark.parametrize("make,train", [
    (lambda: ConvBN(), True),  # training mode: batch statistics, not a per-channel constant
    (lambda: ConvBN(other_reader=True), False),  # the conv's output is read by another op too
    (lambda: ConvBN(relu_between=True), False),  # the batch norm's input is not the conv's output
    (lambda: ConvBN(scale=0.0), False),  # y * 0 is NaN where y is inf: not a weight scale
    (lambda: ConvBN(scale=float("inf")), False),
])
def test_does_not_fire(make, train):
    model = make().train(train)
    x = torch.randn(2, 3, 6, 6)
    _, folded = _graphs(model, x)
    assert not _folds(folded), folded.log


def test_sums_alone_are_not_folded_and_a_chain_stops_at_a_second_reader():
    """`conv(x) + p` saves nothing folded (the bias add stays in the kernel); in `conv(x) * 2 + p` read
    twice, the product folds and the sum stays."""
    p = torch.randn(4, 1, 1)
    x = torch.randn(2, 3, 6, 6)
    conv = nn.Conv2d(3, 4, 3)
    only_sum = Fn(lambda self, x: torch.relu(self.conv(x) + self.p), p=p)
    only_sum.conv = conv
    assert not _folds(_graphs(only_sum, x)[1])
    twice = Fn(lambda self, x: (lambda y: y * y)(self.conv(x) * 2.0 + self.p), p=p)
    twice.conv = conv
    captured, folded = _graphs(twice, x)
    (fold,) = _folds(folded)
    assert [s[0] for s in fold.args[2:]] == ["mul", "add"]
    state = dict(twice.named_parameters())
    with torch.no_grad():
        assert torch.allclose(run_graph(folded, state, [x]), run_graph(captured, state, [x]), rtol=1e-5, atol=1e-5)


def test_fp16_batch_norm_call_folds_in_float64_rounded_once():
    """fp16 data keeps batch norm an aten call; it folds like the pointwise one, rounded once to fp16."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    model[1].running_var.uniform_(0.5, 2.0)
    model[1].running_mean.normal_(0, 0.5)
    model = model.half()
    x = torch.randn(2, 3, 6, 6, dtype=torch.float16)
    captured, folded = _graphs(model, x)
    assert any(n.target == "aten.native_batch_norm.default" for n in captured.nodes)
    (fold,) = _folds(folded)
    assert not any(n.op == "aten" and "batch_norm" in n.target for n in folded.nodes)
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    with torch.no_grad():
        got = run_graph(folded, state, [x])
        ref = model.float()(x.float())
    assert got.dtype == torch.float16 and torch.allclose(got.float(), ref, atol=1e-2, rtol=1e-2)


def test_header_guard_and_explain(tmp_path):
    path, _ = _problem(tmp_path, "conv2d_bn_relu")
    result = compile_problem(load_problem(path))
    src = result.source
    header = src.split('"""')[1]
    assert "Folded into convolution weights and biases" in header
    assert "batch_norm(self.bn, eval) into self.conv.weight and a bias" in header
    assert "_tw_fold(self, " in src and "self._modules['bn'].training is not False" in src
    assert any(line.startswith("fold_conv_affine: ") for line in result.simplified.log)  # what explain prints
    cuda = src.split('_CUDA_SRC = r"""')[1].split('"""')[0]
    assert "__global__" in cuda and "rsqrt" not in cuda  # the kernel does no batch norm math
    alone = compile_problem(load_problem(_problem(tmp_path, "conv2d_bias_bn_alone")[0]))
    assert not alone.plan.kernels and "_k0" not in alone.source  # the convolution writes the result


def _emulated(tmp_path, name: str, pick=None, dtype="float32"):
    """(ModelNew on the emulator, the reference Model class, an input); `pick`: the layout planning's
    choice, forced (the CPU has no CUDA events to time with)."""
    path, ns = _problem(tmp_path, name, dtype)
    new_cls, result = emulated_model(path, tmp_path)
    new_cls.forward.__globals__["_tw_pick"] = lambda x, w, args, f, to=None: ((f if pick else None, pick == "bench"), [])
    torch.manual_seed(3)
    return new_cls, ns["Model"], ns["get_inputs"]()[0], result


def _reference(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's output in fp32 (a copy in fp32 for fp16/bf16 models)."""
    if x.dtype == torch.float32:
        return model(x)
    return copy.deepcopy(model).float()(x.float())


def _no_general_path(*args):
    raise AssertionError("the inputs took the general path")


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
@pytest.mark.parametrize("name,pick,dtype", [
    ("conv2d_bn_relu", None, "float32"), ("conv2d_bn_relu", "channels_last", "float32"),
    ("conv2d_bias_bn_alone", "channels_last", "float32"), ("convt2d_groups_bn_silu", None, "float32"),
    ("conv3d_bn_plain_scale_shift", "channels_last", "float32"), ("conv1d_param_scale_div", None, "float32"),
    ("dwconv2d_bn_relu6", None, "float32"), ("dwconv1d_causal_bn_silu", None, "float32"),
    ("conv2d_scale_alone", "channels_last", "float32"),
    ("conv2d_bn_residual", "bench", "float32"),
    ("conv2d_bn_relu", None, "float16"), ("convt2d_groups_bn_silu", "channels_last", "bfloat16")])
def test_emitted_file_folds_again_when_a_tensor_changes(tmp_path, name, pick, dtype):
    """fp16/bf16: batch norm stays an aten call, folded in float64 and rounded once; the reference
    then runs in fp32 (the tolerance is the dtype's)."""
    new_cls, model_cls, x, result = _emulated(tmp_path, name, pick, dtype)
    tol = 1e-5 if dtype == "float32" else 3e-2
    assert _folds(result.plan.graph)
    torch.manual_seed(0)
    ref = model_cls()
    new = new_cls()
    assert list(new.state_dict()) == list(ref.state_dict())
    new.load_state_dict(ref.state_dict())
    new._tw_general = _no_general_path

    def check(what, ctx=torch.no_grad):
        with ctx():
            want, got = _reference(ref, x), new(x.clone())
        assert got.dtype == x.dtype and torch.allclose(got.float(), want, atol=tol, rtol=tol), \
            f"{what}: {(got.float() - want).abs().max()}"

    check("first call")
    held = dict(new.__dict__["_tw_folds"])
    check("second call")
    assert all(new.__dict__["_tw_folds"][k][2] is v[2] for k, v in held.items())  # folded once, not per call
    torch.manual_seed(1)
    ref.load_state_dict(model_cls().state_dict())
    new.load_state_dict(ref.state_dict())
    check("after load_state_dict")
    for m in (ref, new):
        with torch.no_grad():
            for t in m.state_dict().values():
                if t.is_floating_point():
                    t.mul_(1.5)  # running_var, running_mean, the weights and scales, in place
    check("after in-place updates")
    assert list(new.state_dict()) == list(ref.state_dict())
    for m in (ref, new):
        with torch.no_grad():
            m.state_dict()[next(k for k in m.state_dict() if k.endswith("weight"))].add_(0.25)
    check("in inference mode", torch.inference_mode)  # NOTE: folded tensors are ordinary ones: versions readable


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_training_mode_takes_the_general_path(tmp_path):
    new_cls, model_cls, x, _ = _emulated(tmp_path, "conv2d_bn_relu")
    torch.manual_seed(0)
    ref, new = model_cls(), new_cls()
    new.load_state_dict(ref.state_dict())
    with torch.no_grad():
        new(x)  # folded in eval mode first
        ref.train(), new.train()
        want, got = ref(x), new(x)
    assert torch.equal(got, want)  # batch statistics, as the original computes them
    assert torch.equal(new.bn.running_mean, ref.bn.running_mean)


@pytest.mark.skipif(GXX is None, reason="g++ not installed")
def test_a_model_built_in_inference_mode_folds_on_each_call(tmp_path):
    """Inference tensors keep no version counter: nothing to key on, so the fold is made again each call."""
    new_cls, model_cls, x, _ = _emulated(tmp_path, "conv2d_bn_relu")
    with torch.inference_mode():
        torch.manual_seed(0)
        ref, new = model_cls(), new_cls()
        new.load_state_dict(ref.state_dict())
        new._tw_general = _no_general_path
        new(x)
        ref.bn.running_var.mul_(2.0), new.bn.running_var.mul_(2.0)
        assert torch.allclose(new(x), ref(x), atol=1e-5, rtol=1e-5)


def test_cuda_graph_captures_again_when_a_tensor_changes_in_place(tmp_path):
    path, _ = _problem(tmp_path, "conv2d_bn_relu")
    src = compile_problem(load_problem(path), Options(cuda_graph=True)).source
    assert "_tw_graphed(self, (x,), (p1, p2, p3, p4, p5), self._tw_fast)" in src
    assert "key = tuple((t.data_ptr(), t._version) for t in state)" in src
    scope = {"torch": torch}
    exec(src[src.index("def _tw_graphed("):src.index("\n\n\n", src.index("def _tw_graphed("))], scope)
    with torch.inference_mode():  # inference tensors: no version to see a change by, so no graph either
        state = (torch.ones(3),)
        assert torch.equal(scope["_tw_graphed"](nn.Module(), (torch.ones(3),), state, lambda x, p: x + p), 2 * state[0])


def test_a_packed_weight_holds_the_weight_it_was_packed_from():
    """`_tw_conv` keys its channels-last copy on (id, address, version) and holds the source, so a
    weight folded again later (a new tensor, version 0, maybe at the same address) never takes a
    freed one's id and with it the stale copy."""
    from torchweld.emit.runtime import pasted

    scope = {"torch": torch}
    exec(pasted("conv_run"), scope)
    scope["_tw_pick"] = lambda x, w, args, fmt, to=None: ((fmt, False), [])
    module, x = nn.Module(), torch.randn(2, 3, 6, 6)
    for _ in range(3):
        w = torch.randn(4, 3, 3, 3)
        got = scope["_tw_conv"](module, 0, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        assert module.__dict__["_tw_conv_packed"][(0, torch.channels_last)][2] is w
        assert torch.allclose(got, torch.nn.functional.conv2d(x, w, padding=1), atol=1e-5)


@pytest.mark.parametrize("k", [1, 3])
def test_a_mean_after_the_folded_conv_still_moves_inside_it(k):
    """The fold runs before the reduce rewrites: mean(bn(conv1x1(x))) becomes conv1x1(mean(x)) with the
    folded weight, its bias added to the (N, C) result."""
    model = nn.Sequential(nn.Conv2d(3, 4, k), nn.BatchNorm2d(4)).eval()
    model[1].running_var.uniform_(0.5, 2.0)
    model[1].running_mean.normal_()
    x = torch.randn(2, 3, 8, 8)
    mean = Fn(lambda self, x: self.m(x).mean((2, 3)))
    mean.m = model
    captured, folded = _graphs(mean, x)
    assert _folds(folded) and any(line.startswith("reduce_rewrites:") for line in folded.log)
    state = dict(mean.named_parameters()) | dict(mean.named_buffers())
    with torch.no_grad():
        assert torch.allclose(run_graph(folded, state, [x]), mean(x), atol=1e-5, rtol=1e-5)

