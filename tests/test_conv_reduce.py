"""Reductions in our convolution's epilogue (cuh/conv_reduce.cuh): a sum, mean, max or min over every
output pixel of an image (per-tile partials in a workspace, then a final kernel; the full output stored
only where asked) and a softmax or log-softmax over the channels of each pixel, on the CPU emulator
against fp64 with NaN-poisoned outputs and workspace, on both main loops (wgmma and mma.sync) and both
gathers; and the kernel's refusals."""
from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import torch

from conv_harness import TOLERANCE, bind, build_emu, emulators, errors, operands, oracle, result, site, sweep
from helpers import sweep_ways
from torchweld.codegen.conv_spec import plan, unsupported

GXX = shutil.which("g++")
CASES = [c for c in sweep() if c.spec.reduce]
WAYS = [(90, 1), (80, 1), (80, 0)]


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return emulators(tmp_path_factory, "conv_reduce", CASES)


def test_cases_cover_the_reductions():
    specs = [plan(c.spec).spec for c in CASES]
    assert {s.reduce for s in specs} == {"sum", "mean", "max", "min", "softmax", "log_softmax", "chan_sum", "chan_mean",
                                         "chan_max", "chan_min"}
    assert {s.dims for s in specs} == {1, 2, 3} and {s.transposed for s in specs} == {False, True}
    assert any(s.reduce_store for s in specs) and any(s.groups > 1 for s in specs)
    assert {plan(c.spec).sm80[0] for c in CASES} == {64, 128} and {plan(c.spec).sm90[0] for c in CASES} == {64, 128}
    hw = [(plan(c.spec).m // c.spec.n, plan(c.spec).sm80[0]) for c in CASES if c.spec.reduce in ("sum", "mean")]
    assert any(h > bm for h, bm in hw) and any(2 * h < bm for h, bm in hw)  # images over two tiles, tiles over 3+ images


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_emulated_reduction_matches_fp64":  # NOTE: every way per site under --full-sweep
        sweep_ways(metafunc, "case, cc, vec", CASES, WAYS, [c.id for c in CASES])


def test_emulated_reduction_matches_fp64(emu, case, cc, vec):
    """The reduced result (and the full output where stored) within the precision's tolerance, every
    element written, nothing outside the views, no full output where it is not stored."""
    lib = emu[cc]
    ops = operands(case, seed=cc + vec)
    assert bind(lib, case, ops, vec)() == 0, lib.twg_emu_error().decode()
    assert getattr(lib, f"tw_conv_path_{case.spec.name}")() == (90 if cc == 90 and vec else 80)
    tol = TOLERANCE[plan(case.spec).spec.precision]
    keys = [result(case)] + (["out"] if case.spec.reduce_store else [])
    for key in keys:
        got, view = ops[key]
        ref = oracle(case, ops, full=key == "out" and result(case) != "out")
        max_err, rel, unwritten = errors(view, ref)
        assert unwritten == 0 and rel < tol, (key, max_err, rel, unwritten)
        outside = torch.ones_like(got, dtype=torch.bool)
        outside.as_strided(view.shape, view.stride()).fill_(False)
        assert got[outside].isnan().all(), f"written outside the {key} view"
    if result(case) == "red" and not case.spec.reduce_store:
        assert ops["out"][0].isnan().all(), "the full output was stored"


@pytest.mark.parametrize("cid, cc, old, new", [
    ("red_mean2d", 80, "for (int r = r0 + 1; r <= r1; ++r)", "for (int r = r0 + 1; r < r1; ++r)"),  # a row lost
    ("red_mean_big", 90, "const int slot = m0 / BM - n * HW / BM;", "const int slot = 0;"),  # slots overwritten
    ("sm_softmax2d", 80, "S::post(p, j, S::RED", "S::post(p, 0, S::RED"),  # post ops of the wrong channel
    ("sm_log1d_h16", 90, "sum += e;", "if (j < 8) sum += e;"),  # part of the sum
    ("ch_max2d", 80, "for (int s = 1; s < TPR; s *= 2) v =", "for (int s = 1; s < 1; s *= 2) v ="),  # lanes not combined
    ("sm_softmax_w90", 90, "for (int s = 1; s < TPR; s *= 2) sum +=", "for (int s = 1; s < 1; s *= 2) sum +="),
])
def test_emulator_is_not_blind(tmp_path, cid, cc, old, new):
    """A reduction dropping a row of each image's segment, one whose row tiles overwrite one slot, a
    softmax applying the first channel's post ops to every channel, one whose sum misses channels, a
    channel max or a softmax sum whose lanes sharing a row are not combined: each fails."""
    from torchweld.codegen import conv_source
    if GXX is None:
        pytest.skip("g++ not installed")
    case = next(c for c in CASES if c.id == cid)
    text = (conv_source.CUH / "conv_reduce.cuh").read_text()
    assert old in text
    prelude = conv_source.conv_prelude
    conv_source.conv_prelude = lambda plans, emu=False: prelude(plans, emu).replace(text, text.replace(old, new))
    try:
        lib = build_emu([case.spec], tmp_path, cc=cc)
    finally:
        conv_source.conv_prelude = prelude
    ops = operands(case)
    assert bind(lib, case, ops, 1)() == 0
    max_err, _, unwritten = errors(ops[result(case)][1], oracle(case, ops))
    assert max_err > 1e-2 or unwritten


def test_refusals():
    """Where the epilogue cannot hold the reduction, the generator says why."""
    sm = site("s", 2, cin=8, cout=16, reduce="softmax").spec
    assert unsupported(replace(sm, groups=2)) and "groups" in unsupported(replace(sm, groups=2))
    assert "channels" in unsupported(replace(sm, cout=160))
    assert "narrower" in unsupported(replace(sm, cout=48, sm80_tile=(128, 32, 32, 32)))
    assert unsupported(replace(sm, reduce_store=True)) and unsupported(replace(sm, reduce="median"))
    assert unsupported(replace(sm, reduce="mean", pool="max", pool_window=(2, 1)))
    full = site("f", 2, cin=8, cout=16, residual=True, reduce="mean").spec
    assert unsupported(replace(full, post="v + res(q, c)")) is not None
    assert plan(replace(sm, cout=100)).sm80[1] == 128 and plan(replace(sm, cout=40)).sm80[1] >= 64
    assert not plan(site("t", 2, True, size=4, stride=2, cin=32, cout=16, reduce="mean").spec).phased


# Realistic reducing sites nvcc compiles: global pools after ResNet-like layers (stored too or not), a
# channel softmax over 64 and 128 channels, a log-softmax after a transposed convolution.
NVCC_CASES = [
    site("gap_f32", 2, False, n=32, cin=64, cout=128, size=56, padding=1, bias=True, relu=True, reduce="mean"),
    site("gmax_f32_store", 2, False, n=32, cin=128, cout=128, size=28, padding=1, bn=True, reduce="max", store=True,
         tile90=(128, 128)),
    site("gsum_h16", 2, False, "float16", n=32, cin=256, cout=256, size=14, padding=1, residual=True, reduce="sum"),
    site("gap_1x_3d", 3, False, n=4, cin=32, cout=64, size=(8, 16, 16), padding=1, precision="1xtf32", reduce="mean"),
    site("softmax_f32", 2, False, n=32, cin=32, cout=64, size=64, padding=1, bias=True, reduce="softmax",
         out_layout="nc"),
    site("softmax_f32_wide", 2, False, n=16, cin=64, cout=128, size=32, padding=1, reduce="softmax", post_scale=True,
         tile90=(128, 128), out_layout="nc"),
    site("logsoftmax_b16_t2", 2, True, "bfloat16", n=16, cin=64, cout=21, size=64, kernel=2, stride=2,
         reduce="log_softmax", out_layout="nc"),
    site("chan_max_f32", 2, False, n=32, cin=16, cout=48, size=96, padding=1, bias=True, reduce="chan_max", out_layout="nc"),
]


@pytest.fixture(scope="module")
def nvcc_logs(tmp_path_factory):
    from test_conv_codegen import NVCC, ptxas_logs
    if NVCC is None:
        pytest.skip("nvcc not installed")
    return ptxas_logs(tmp_path_factory.mktemp("conv_reduce_nvcc"), NVCC_CASES)


@pytest.mark.parametrize("arch", ["sm90a", "sm80"])
def test_nvcc_builds_reductions_without_spills(nvcc_logs, arch):
    """Every main kernel and final kernel of the reducing sites: zero-byte stack frames, no spills; the
    Hopper kernels with two consumer warpgroups keep 168 registers at entry."""
    import re
    log = nvcc_logs[arch]
    assert not re.findall(r"C75(07|08|17|18)[^\n]*", log)
    kernels = re.findall(r"Function properties for (\w+)\n\s+(\d+) bytes stack frame, (\d+) bytes spill stores", log)
    finals = {(c.id, bm) for c in NVCC_CASES if c.spec.reduce in ("sum", "mean", "max", "min")
              for bm in {plan(c.spec).sm80[0], plan(c.spec).sm90[0]}}
    want = sum(1 + plan(c.spec).vec + (plan(c.spec).sm90 is not None) for c in NVCC_CASES) + len(finals)
    assert len(kernels) == want, [k for k, *_ in kernels]
    assert len([k for k, *_ in kernels if "twc_red_final" in k]) == len(finals)
    assert [k for k, frame, spill in kernels if frame != "0" or spill != "0"] == []
    if arch == "sm90a":
        regs = re.findall(r"Compiling entry function '_Z8twc_sm90I\d+twc_site_\w+?Li(\d+)E\w*' for 'sm_90a'.*?"
                          r"Used (\d+) registers", log, re.S)
        assert len(regs) == len(NVCC_CASES) and all(r == "168" for bm, r in regs if bm == "128"), regs
