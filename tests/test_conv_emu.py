"""Our convolution kernel (codegen/conv*.py, cuh/conv_sm80.cuh) run on the CPU emulator
(tests/gemm_emu.h) against torch's convolution in fp64, outputs poisoned with NaN, over a sweep of
every setting class: 1d/2d/3d, forward and transposed, stride, padding, output padding, dilation,
groups, bias and epilogues, fp32 (3xTF32, 1xTF32), fp16, bf16, channels-last and NCHW operands
(16-byte and element gathers), odd channel counts, every tile shape; plus sites drawn at random."""
from __future__ import annotations

import math

import pytest
import torch

from conv_harness import TOLERANCE, bind, build_emu, emulators, errors, operands, oracle, random_sites, result, sweep
from helpers import sweep_ways
from torchweld.codegen.conv_spec import TILES, TILES90, plan

RANDOM = random_sites(2026, 16)
CASES = sweep() + RANDOM


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return emulators(tmp_path_factory, "conv", CASES)


@pytest.mark.parametrize("which", ["all", "default"])
def test_sweep_covers_every_setting_class(which):
    """The whole sweep, and the sample of it CI runs by default, each hold every setting class."""
    cases = CASES if which == "all" else _sampled(CASES[:len(CASES) - len(RANDOM) + 6])
    specs = [plan(c.spec).spec for c in cases]
    assert {s.dims for s in specs} == {1, 2, 3} and {s.transposed for s in specs} == {False, True}
    assert {s.dtype for s in specs} == {"float32", "float16", "bfloat16"}
    assert {s.precision for s in specs} == {"3xtf32", "1xtf32", "native"}
    for attr in ("stride", "padding", "dilation"):
        assert any(max(getattr(s, attr)) > 1 for s in specs)
    assert any(s.transposed and max(s.output_padding) > 0 for s in specs)
    assert any(s.groups > 1 and s.groups < s.cin for s in specs) and any(s.groups == s.cin > 1 for s in specs)
    assert {plan(c.spec).vec for c in cases} == {True, False}
    assert {s.dims for c in cases if plan(c.spec).phased for s in [c.spec]} == {1, 2, 3}
    assert {(s.pool, math.prod(s.pool_window)) for s in specs if s.pool} >= {("max", 2), ("max", 4), ("max", 8),
                                                                             ("avg", 2), ("avg", 8)}
    assert {tuple(plan(c.spec).sm80[:4]) for c in cases} >= set(TILES)
    waves = {(plan(c.spec).sm90[:2], plan(c.spec).prec) for c in cases if plan(c.spec).sm90}
    assert {(bm, bn) for (bm, bn), _ in waves} >= {(bm, bn) for bm in (64, 128) for bn in TILES90 if (bm == 128) != (bn in (16, 64))}
    assert {prec for _, prec in waves} == {0, 1, 3}


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_emulated_conv_matches_fp64":
        # NOTE: by default (CI's time budget) 6 of the random sites and every other case, with those that alone
        # hold a setting class the coverage test names; all under --full-sweep (the kind is opt-in: --conv-ours)
        cases = CASES if metafunc.config.getoption("--full-sweep") else _sampled(CASES[:len(CASES) - len(RANDOM) + 6])
        sweep_ways(metafunc, "case, cc, vec", cases, [(90, 1), (80, 1), (80, 0)], [c.id for c in cases])


def _classes(case) -> set:
    """The setting classes `test_sweep_covers_every_setting_class` asks of the sweep that `case` holds."""
    p = plan(case.spec)
    s = p.spec
    return {("dims", s.dims), ("transposed", s.transposed), ("dtype", s.dtype), ("precision", s.precision),
            ("vec", p.vec), ("phased", s.dims if p.phased else None), ("pool", s.pool, math.prod(s.pool_window)),
            ("sm80", tuple(p.sm80[:4])), ("sm90", p.sm90[:2] if p.sm90 else None, p.prec),
            ("groups", s.groups > 1 and s.groups < s.cin, s.groups == s.cin > 1),
            ("output_padding", s.transposed and max(s.output_padding) > 0)}


def _sampled(cases: list) -> list:
    """Every other case, and each other one that holds a setting class none of those does."""
    kept = cases[::2]
    held = set().union(*map(_classes, kept))
    for c in cases[1::2]:
        if not _classes(c) <= held:
            kept.append(c)
            held |= _classes(c)
    return sorted(kept, key=cases.index)


def test_emulated_conv_matches_fp64(emu, case, cc, vec):
    """Every output element written, nothing outside the output view, error within the precision's
    tolerance; on cc 9.0 the wgmma loop runs every site that gathers 16 bytes."""
    lib = emu[cc]
    ops = operands(case, seed=vec + cc)
    err = bind(lib, case, ops, vec)()
    assert err == 0, lib.twg_emu_error().decode()
    assert getattr(lib, f"tw_conv_path_{case.spec.name}")() == (90 if cc == 90 and plan(case.spec).sm90 else 80)
    tol = TOLERANCE[plan(case.spec).spec.precision]
    for key, ref in ((result(case), oracle(case, ops)), ("out", oracle(case, ops, full=True))):
        got, view = ops[key]
        if key == "out" and (result(case) == "out" or not case.spec.reduce_store):
            assert key == result(case) or got.isnan().all(), "a pixel reduction stored the full output"
            continue
        max_err, rel, unwritten = errors(view, ref)
        assert unwritten == 0 and rel < tol, (key, max_err, rel, unwritten)
        outside = torch.ones_like(got, dtype=torch.bool)
        outside.as_strided(view.shape, view.stride()).fill_(False)
        assert got[outside].isnan().all(), "written outside the output view"


@pytest.mark.parametrize("cid, old, new", [
    ("t2_s2", "if (x < 0 || x % ST) return -1;", "if (x < 0) return -1;"),  # the transposed divisibility test
    ("p2_phased_k4", "count = first < 0 ? 0 : (K - 1 - first) / step + 1;", "count = first < 0 ? 0 : 1;"),  # the tap skip
    ("pool_max2d", "for (int s = 4; s < 4 * S::WIN; s *= 2)", "for (int s = 4; s < 8; s *= 2)"),  # half the window
])
def test_emulator_is_not_blind(emu, tmp_path, cid, old, new):
    """A kernel with the transposed gather's divisibility test removed (zero insertion forgotten), one
    that skips taps that do reach a phase, or one pooling half of each window, fails."""
    from torchweld.codegen import conv_source
    case = next(c for c in CASES if c.id == cid)
    bad = (conv_source.CUH / "conv_sm80.cuh").read_text().replace(old, new)
    assert old not in bad
    old = conv_source.conv_prelude
    conv_source.conv_prelude = lambda plans, emu=False: old(plans, emu).replace(
        (conv_source.CUH / "conv_sm80.cuh").read_text(), bad)
    try:
        lib = build_emu([case.spec], tmp_path, cc=80)
    finally:
        conv_source.conv_prelude = old
    ops = operands(case)
    assert bind(lib, case, ops, 1)() == 0
    assert errors(ops["out"][1], oracle(case, ops))[1] > 1e-2
