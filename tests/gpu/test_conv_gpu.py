"""On a GPU: our convolution kernel kind (torchweld/codegen/conv_*.py) over the emulator's sweep of
every setting class (1d/2d/3d, forward and transposed, stride, padding, output padding, dilation,
groups, epilogues, fp32/fp16/bf16, both layouts), sites drawn at random, and realistic layers,
against torch's convolution in fp64 on fresh inputs with the output poisoned with NaN, built the way
an emitted file is (load_inline). fp32 (3xTF32) must err at most 2x cuDNN strict fp32."""
from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import inspect
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conv_harness import TOLERANCE, bind, errors, operands, oracle, pooled, random_sites, result, site, sweep  # noqa: E402
from torchweld.codegen.conv_source import conv_source  # noqa: E402
from torchweld.codegen.conv_spec import plan  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

LAYERS = [  # realistic sizes: ResNet-50, MobileNetV2, a UNet decoder, a 1-d and a 3-d network
    site("r50_3x3", 2, False, n=32, cin=64, cout=64, size=56, padding=1, bias=True, relu=True),
    site("r50_3x3_h16", 2, False, "float16", n=32, cin=128, cout=128, size=28, padding=1, residual=True, relu=True),
    site("r50_1x1_b16", 2, False, "bfloat16", n=32, cin=256, cout=1024, size=14, kernel=1, bn=True),
    site("r50_down", 2, False, n=32, cin=256, cout=512, size=28, kernel=1, stride=2, bn=True),
    site("r50_stem_nc", 2, False, n=16, cin=3, cout=64, size=224, kernel=7, stride=2, padding=3, bn=True, relu=True,
         x_layout="nc", out_layout="nc"),
    site("mb_expand_1x", 2, False, n=64, cin=32, cout=192, size=28, kernel=1, bn=True, relu=True, precision="1xtf32"),
    site("unet_up_t", 2, True, n=8, cin=128, cout=64, size=32, kernel=2, stride=2, bias=True),
    site("unet_up_t_h16", 2, True, "float16", n=8, cin=256, cout=128, size=16, kernel=4, stride=2, padding=1),
    site("tcn_1d", 1, False, n=16, cin=128, cout=128, size=2048, kernel=3, dilation=4, padding=4, residual=True),
    site("vgg_pool", 2, False, n=16, cin=64, cout=128, size=112, padding=1, bias=True, relu=True, pool="max"),
    site("c3d", 3, False, n=4, cin=32, cout=64, size=(8, 28, 28), kernel=3, padding=1, bias=True, relu=True),
    site("t3d_seed", 3, True, n=4, cin=32, cout=16, size=(8, 16, 16), kernel=3, stride=2, padding=1, output_padding=1),
    # reductions in the epilogue: a classifier head's global average pool (full output never written), a
    # squeeze-excite's pool beside the stored output, a segmentation head's channel softmax, a channel max pool
    site("gap_head", 2, False, n=64, cin=32, cout=256, size=32, padding=1, bias=True, relu=True, reduce="mean"),
    site("se_pool_store", 2, False, n=32, cin=128, cout=128, size=28, padding=1, bn=True, relu=True, reduce="mean",
         store=True, out_layout="nc"),
    site("gmax_h16", 2, False, "float16", n=32, cin=256, cout=256, size=14, kernel=1, reduce="max"),
    site("seg_softmax", 2, False, n=32, cin=32, cout=64, size=64, padding=1, bias=True, reduce="softmax", out_layout="nc"),
    site("seg_log_softmax_t", 2, True, n=16, cin=64, cout=21, size=64, kernel=2, stride=2, bias=True,
         reduce="log_softmax", out_layout="nc"),
    site("chan_max_pool", 2, False, n=32, cin=16, cout=48, size=96, padding=1, bias=True, reduce="chan_max",
         out_layout="nc"),
]
CASES = sweep() + random_sites(2026, 16) + LAYERS
IDS = [c.id for c in CASES]


def cflags() -> list[str]:
    """What an emitted file's build adds (`_tw_gemm_flags`): sm_90a on an sm_90 device (wgmma, setmaxnreg).
    NOTE: an `arch` flag here replaces load_inline's own arch flags, so it is given on sm_90 devices only."""
    return ["-O3", "-lineinfo"] + (["-gencode=arch=compute_90a,code=sm_90a"]
                                   if torch.cuda.get_device_capability() == (9, 0) else [])


@pytest.fixture(scope="session")
def libs():
    """The sites in 4 extensions built in parallel, opened with ctypes: {case id: library}."""
    from torch.utils import cpp_extension

    def build(chunk):
        src = conv_source([c.spec for c in chunk])
        flags = cflags()
        name = "tw_conv_test_" + hashlib.sha256((src + repr(flags)).encode()).hexdigest()[:16]
        kw = dict(name=name, cpp_sources="", cuda_sources=src, is_python_module=False, extra_cuda_cflags=flags)
        if "no_implicit_headers" in inspect.signature(cpp_extension.load_inline).parameters:
            kw["no_implicit_headers"] = True
        return chunk, ctypes.CDLL(cpp_extension.load_inline(**kw))

    chunks = [CASES[i::4] for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return {c.id: lib for chunk, lib in pool.map(build, chunks) for c in chunk}


def _stream() -> int:
    return torch.cuda.current_stream().cuda_stream


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("vec", [1, 0])
def test_conv_matches_fp64(libs, case, vec):
    """vec 1: the wgmma loop on Hopper where the site gathers 16 bytes (else mma.sync); vec 0: element gathers."""
    lib = libs[case.id]
    p = plan(case.spec)
    hopper = torch.cuda.get_device_capability() == (9, 0) and p.sm90 is not None
    assert getattr(lib, f"tw_conv_path_{case.spec.name}")() == (90 if hopper else 80), "built with sm_90a?"
    for seed in (1, 2):  # fresh inputs each run
        ops = operands(case, seed=seed + 10 * vec, device="cuda")
        assert bind(lib, case, ops, vec, _stream())() == 0
        torch.cuda.synchronize()
        # NOTE: a pixel reduction's result is "red"; its full output "out" is written only where stored
        for key in [result(case)] + (["out"] if case.spec.reduce_store else []):
            got, view = ops[key]
            max_err, rel, unwritten = errors(view, oracle(case, ops, full=key != result(case)))
            assert unwritten == 0 and rel < TOLERANCE[p.spec.precision], (key, max_err, rel, unwritten)
            outside = torch.ones_like(got, dtype=torch.bool)
            outside.as_strided(view.shape, view.stride()).fill_(False)
            assert got[outside].isnan().all(), f"written outside the {key} view"
        if result(case) == "red" and not case.spec.reduce_store:
            assert ops["out"][0].isnan().all(), "the full output was stored"


@pytest.mark.parametrize("cid", ["r50_3x3", "r50_down", "unet_up_t", "tcn_1d", "c3d", "t3d_seed", "vgg_pool"])
def test_3xtf32_error_at_most_twice_cudnn_fp32(libs, cid):
    """3xTF32's relative error against fp64 <= 2x cuDNN strict fp32's, same inputs (no epilogue)."""
    case = next(c for c in CASES if c.id == cid)
    ops = operands(case, seed=11, device="cuda")
    assert bind(libs[cid], case, ops, 1, _stream())() == 0
    ref = oracle(case, ops)
    s = plan(case.spec).spec
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        acc = torch.convolution(ops["x"][1], ops["w"][1], None, s.stride, s.padding, s.dilation, s.transposed,
                                s.output_padding, s.groups)
        views = {x.name: ops[x.name][1].view(1, -1, *([1] * s.dims)) if x.kind == "chan" else ops[x.name][1]
                 for x in s.inputs}
        cudnn = pooled(case, case.epi(acc, views), views)
    finally:
        torch.backends.cudnn.allow_tf32 = old
    ours, theirs = errors(ops["out"][1], ref)[1], errors(cudnn, ref)[1]
    print(f"{cid}: 3xTF32 {ours:.3e}, cuDNN fp32 {theirs:.3e}")
    assert ours <= 2 * theirs


def test_kernels_do_not_touch_other_streams_or_inputs(libs):
    """The launch runs on the given stream and leaves x, w and the epilogue inputs as they were."""
    case = next(c for c in CASES if c.id == "r50_3x3_h16")
    ops = operands(case, seed=5, device="cuda")
    before = {k: v[0].clone() for k, v in ops.items() if k != "out"}
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert bind(libs[case.id], case, ops, 1, s.cuda_stream)() == 0
    s.synchronize()
    assert all(torch.equal(before[k], ops[k][0]) for k in before)
    assert errors(ops["out"][1], oracle(case, ops))[1] < TOLERANCE["native"]


@pytest.mark.parametrize("cid", ["gap_head", "se_pool_store", "gmax_h16", "red_mean_big", "red_sum1d_groups"])
def test_pixel_reductions_are_deterministic(libs, cid):
    """The same inputs give bit-identical reductions run after run (per-tile partials, no atomics)."""
    case = next(c for c in CASES if c.id == cid)
    ops = operands(case, seed=3, device="cuda")
    runs = []
    for _ in range(3):
        ops["red"][0].fill_(float("nan"))
        assert bind(libs[cid], case, ops, 1, _stream())() == 0
        torch.cuda.synchronize()
        runs.append(ops["red"][0].clone())
    assert all(torch.equal(runs[0], r) for r in runs[1:]) and not runs[0].isnan().all()
