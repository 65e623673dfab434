"""Our convolution kernel (codegen/conv*.py, cuh/conv_sm80.cuh) run on the CPU emulator
(tests/gemm_emu.h) against torch's convolution in fp64, outputs poisoned with NaN, over a sweep of
every setting class: 1d/2d/3d, forward and transposed, stride, padding, output padding, dilation,
groups, bias and epilogues, fp32 (3xTF32, 1xTF32), fp16, bf16, channels-last and NCHW operands
(16-byte and element gathers), odd channel counts, every tile shape; plus sites drawn at random."""
from __future__ import annotations

import random
import shutil

import pytest
import torch

from conv_harness import TOLERANCE, bind, build_emu, errors, operands, oracle, site
from torchweld.codegen.conv_spec import TILES, plan

GXX = shutil.which("g++")


def _sweep() -> list:
    cases = []
    for dims in (1, 2, 3):
        size = {1: 11, 2: 6, 3: (3, 4, 5)}[dims]
        for tr in (False, True):
            t = "t" if tr else "f"
            op = dict(output_padding=1) if tr else {}
            cases += [
                site(f"{t}{dims}_basic", dims, tr, size=size, padding=1),
                site(f"{t}{dims}_s2", dims, tr, size=size, stride=2, **op),
                site(f"{t}{dims}_dil", dims, tr, size=size, dilation=2, padding=2, bias=True),
                site(f"{t}{dims}_groups", dims, tr, size=size, cin=8, cout=12, groups=4, padding=1, stride=2, relu=True),
                site(f"{t}{dims}_dw", dims, tr, size=size, cin=8, cout=8, groups=8, padding=1),
                site(f"{t}{dims}_odd", dims, tr, size=size, cin=3, cout=5, kernel=2, stride=(2,) * dims,
                     bias=True, x_layout="nc", out_layout="nc"),
                site(f"{t}{dims}_h16", dims, tr, "float16", size=size, padding=1, bias=True, residual=True, relu=True),
                site(f"{t}{dims}_b16", dims, tr, "bfloat16", size=size, stride=2, bn=True, **op),
                site(f"{t}{dims}_1x", dims, tr, size=size, kernel=1, precision="1xtf32", out_layout="nc"),
            ]
    cases += [  # the mixed settings of one dim each, and every tile
        site("f2_mixed", 2, False, size=(9, 7), kernel=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
             groups=2, cin=8, cout=8, bias=True, bn=True, residual=True, relu=True, x_layout="nc"),
        site("t2_mixed", 2, True, size=(4, 5), kernel=(3, 2), stride=(3, 2), padding=(1, 0), dilation=(2, 1),
             output_padding=(1, 0), groups=2, cin=8, cout=6, bias=True, residual=True),
        site("t2_op_dil", 2, True, size=5, kernel=2, stride=1, dilation=3, output_padding=2, cin=4, cout=4),
        site("f2_pad_big", 2, False, size=4, kernel=3, padding=3, stride=3, cin=4, cout=4),
        site("f2_k_tail", 2, False, "float16", size=5, kernel=3, cin=24, cout=40, padding=1),
        site("f2_ncl_h16", 2, False, "float16", size=5, kernel=3, cin=16, cout=16, x_layout="nc", out_layout="nc"),
    ]
    cases += [site(f"tile_{bm}x{bn}", 2, False, n=3, size=7, cin=16, cout=bn + 8, padding=1, tile=(bm, bn, wm, wn),
                   bias=True) for bm, bn, wm, wn in TILES]
    return cases


def _random(seed: int, count: int) -> list:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        dims, tr = rng.choice((1, 2, 2, 3)), rng.random() < 0.4
        g = rng.choice((1, 1, 2, 3))
        k = tuple(rng.choice((1, 2, 3)) for _ in range(dims))
        st = tuple(rng.choice((1, 2, 3)) for _ in range(dims))
        dil = tuple(rng.choice((1, 1, 2)) for _ in range(dims))
        pad = tuple(rng.randint(0, 2) for _ in range(dims))
        opad = tuple(rng.randint(0, max(s, d) - 1) for s, d in zip(st, dil)) if tr else 0
        size = tuple(rng.randint(2, {1: 12, 2: 6, 3: 4}[dims]) for _ in range(dims))
        dt = rng.choice(("float32", "float32", "float16", "bfloat16"))
        try:
            c = site(f"rand{i}", dims, tr, dt, n=rng.randint(1, 2), cin=g * rng.choice((1, 4, 8)), cout=g * rng.choice((2, 4, 8)),
                     size=size, kernel=k, stride=st, padding=pad, dilation=dil, output_padding=opad, groups=g,
                     bias=rng.random() < 0.5, relu=rng.random() < 0.5, x_layout=rng.choice(("cl", "nc")),
                     out_layout=rng.choice(("cl", "nc")))
            plan(c.spec)
        except ValueError:
            continue  # an empty output: drawn again below
        out.append(c)
    return out


CASES = _sweep() + _random(2026, 16)


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ not installed")
    return build_emu([c.spec for c in CASES], tmp_path_factory.mktemp("conv"))


def test_sweep_covers_every_setting_class():
    specs = [plan(c.spec).spec for c in CASES]
    assert {s.dims for s in specs} == {1, 2, 3} and {s.transposed for s in specs} == {False, True}
    assert {s.dtype for s in specs} == {"float32", "float16", "bfloat16"}
    assert {s.precision for s in specs} == {"3xtf32", "1xtf32", "native"}
    for attr in ("stride", "padding", "dilation"):
        assert any(max(getattr(s, attr)) > 1 for s in specs)
    assert any(s.transposed and max(s.output_padding) > 0 for s in specs)
    assert any(s.groups > 1 and s.groups < s.cin for s in specs) and any(s.groups == s.cin > 1 for s in specs)
    assert {plan(c.spec).vec for c in CASES} == {True, False}
    assert {tuple(plan(c.spec).sm80[:4]) for c in CASES} >= set(TILES)


@pytest.mark.parametrize("vec", [1, 0])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_emulated_conv_matches_fp64(emu, case, vec):
    """Every output element written, nothing outside the output view, error within the precision's tolerance."""
    ops = operands(case, seed=vec)
    err = bind(emu, case, ops, vec)()
    assert err == 0, emu.twg_emu_error().decode()
    assert getattr(emu, f"tw_conv_path_{case.spec.name}")() == 80
    ref = oracle(case, ops)
    got, view = ops["out"]
    max_err, rel, unwritten = errors(view, ref)
    assert unwritten == 0 and rel < TOLERANCE[plan(case.spec).spec.precision], (max_err, rel, unwritten)
    outside = torch.ones_like(got, dtype=torch.bool)
    outside.as_strided(view.shape, view.stride()).fill_(False)
    assert got[outside].isnan().all(), "written outside the output view"


def test_emulator_is_not_blind(emu, tmp_path):
    """A kernel with the transposed gather's divisibility test removed (zero insertion forgotten) fails."""
    import conv_harness
    from torchweld.codegen import conv_source
    case = next(c for c in CASES if c.id == "t2_s2")
    bad = (conv_source.CUH / "conv_sm80.cuh").read_text().replace("if (x < 0 || x % ST) return -1;", "if (x < 0) return -1;")
    assert "x % ST" not in bad
    old = conv_source.conv_prelude
    conv_source.conv_prelude = lambda emu=False: old(emu).replace(
        (conv_source.CUH / "conv_sm80.cuh").read_text(), bad)
    try:
        lib = build_emu([case.spec], tmp_path)
    finally:
        conv_source.conv_prelude = old
    ops = operands(case)
    assert bind(lib, case, ops, 1)() == 0
    assert errors(ops["out"][1], oracle(case, ops))[1] > 1e-2
