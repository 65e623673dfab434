"""CPU checks of the problem corpus in problems/: every file loads, builds, and makes sane inputs."""
from __future__ import annotations

import ast
import gc
import re
import runpy
from pathlib import Path

import pytest
import torch
import torch.nn as nn

PROBLEMS = Path(__file__).resolve().parent.parent / "problems"
FILES = sorted(p for p in PROBLEMS.rglob("*.py") if p.name != "__init__.py")

CATEGORIES = ("seeds", "conv", "conv_transpose", "matmul", "elementwise", "broadcast", "lowp", "reduce", "norm",
              "pool", "models", "recurrent")
MIN_PER_CATEGORY = 4
MIN_PROBLEMS = 36
SEED_FILES = (
    "seed000_convt3d_bias_residual.py",
    "seed001_conv2d_relu_bias.py",
    "seed002_convt3d.py",
    "seed004_convt2d_bias_clamp_scale.py",
)
LOWP_DTYPES = (torch.float16, torch.bfloat16)
ALLOWED_IMPORTS = {"torch", "torch.nn", "torch.nn.functional"}
# Problems whose inputs total fewer elements than this also get one CPU forward pass.
SMALL_INPUT_ELEMENTS = 2_000_000


def _rel(path: Path) -> str:
    return path.relative_to(PROBLEMS).as_posix()


def _category(path: Path) -> str:
    return path.relative_to(PROBLEMS).parts[0]


def _load(path: Path) -> dict:
    """Execute the problem file in a fresh namespace."""
    return runpy.run_path(str(path), run_name=f"corpus_{path.stem}")


def _expected_dtypes(category: str, path: Path | None = None) -> tuple[torch.dtype, ...]:
    """lowp/ holds fp16/bf16 problems; reduce/, norm/ and pool/ mark theirs with an _fp16/_bf16 suffix."""
    lowp_name = path is not None and category in ("reduce", "norm", "pool") and path.stem.endswith(("_fp16", "_bf16"))
    return LOWP_DTYPES if category == "lowp" or lowp_name else (torch.float32,)


def _is_not_implemented(err: Exception) -> bool:
    msg = str(err).lower()
    return isinstance(err, NotImplementedError) or "not implemented" in msg or "not supported" in msg


@pytest.mark.parametrize("path", FILES, ids=[_rel(p) for p in FILES])
def test_problem(path: Path):
    rel = _rel(path)
    category = _category(path)
    assert category in CATEGORIES, f"{rel}: unknown category directory {category!r}"
    assert re.fullmatch(r"[a-z0-9_]+\.py", path.name), f"{rel}: file name must be lowercase, digits, underscores"

    # Static checks: a one-line docstring first, and only the allowed imports.
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    doc = ast.get_docstring(tree)
    assert doc and "\n" not in doc.strip(), f"{rel}: must open with a one-line docstring"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            continue
        bad = [m for m in mods if m not in ALLOWED_IMPORTS]
        assert not bad, f"{rel}: imports {bad}; only torch, torch.nn, torch.nn.functional are allowed"
    assert ".cuda(" not in source, f"{rel}: inputs must be made on the CPU"

    ns = _load(path)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        assert name in ns, f"{rel}: does not define {name}"
    assert isinstance(ns["Model"], type) and issubclass(ns["Model"], nn.Module), f"{rel}: Model is not an nn.Module"

    init_inputs = ns["get_init_inputs"]()
    assert isinstance(init_inputs, (list, tuple)), f"{rel}: get_init_inputs() must return a list"
    torch.manual_seed(0)
    model = ns["Model"](*init_inputs)

    expected = _expected_dtypes(category, path)
    for pname, p in model.named_parameters():
        if p.is_floating_point():
            assert p.dtype in expected, f"{rel}: parameter {pname} is {p.dtype}, expected one of {expected}"
        assert p.device.type == "cpu", f"{rel}: parameter {pname} is on {p.device}"

    torch.manual_seed(0)
    inputs = ns["get_inputs"]()
    assert isinstance(inputs, list) and inputs, f"{rel}: get_inputs() must return a non-empty list"
    for i, t in enumerate(inputs):
        assert isinstance(t, torch.Tensor), f"{rel}: get_inputs()[{i}] is a {type(t).__name__}, not a tensor"
        assert t.device.type == "cpu", f"{rel}: get_inputs()[{i}] is on {t.device}, not the CPU"
        assert t.dtype in expected, f"{rel}: get_inputs()[{i}] is {t.dtype}, expected one of {expected}"
        assert t.numel() > 0 and bool(t.any()), f"{rel}: get_inputs()[{i}] is all zeros"
    if expected == LOWP_DTYPES:
        assert len({t.dtype for t in inputs}) == 1, f"{rel}: lowp inputs mix dtypes"

    n_elements = sum(t.numel() for t in inputs)
    if n_elements < SMALL_INPUT_ELEMENTS:
        try:
            with torch.no_grad():
                out = model(*inputs)
        except (RuntimeError, NotImplementedError) as e:
            if expected == LOWP_DTYPES and _is_not_implemented(e):
                pytest.skip(f"{rel}: forward not implemented on CPU for {inputs[0].dtype}: {str(e)[:120]}")
            raise
        assert isinstance(out, torch.Tensor), f"{rel}: forward returned {type(out).__name__}, not a tensor"
        assert out.numel() > 0, f"{rel}: forward returned an empty tensor"
        assert bool(torch.isfinite(out).all()), f"{rel}: forward output has inf/nan"
        del out

    del model, inputs
    gc.collect()


def test_corpus_size_and_categories():
    counts = {c: 0 for c in CATEGORIES}
    for p in FILES:
        counts[_category(p)] = counts.get(_category(p), 0) + 1
    assert len(FILES) >= MIN_PROBLEMS, f"only {len(FILES)} problems, need at least {MIN_PROBLEMS}"
    short = {c: n for c, n in counts.items() if n < MIN_PER_CATEGORY}
    assert not short, f"categories with fewer than {MIN_PER_CATEGORY} problems: {short}"
    seeds = {p.name for p in FILES if _category(p) == "seeds"}
    assert set(SEED_FILES) <= seeds, f"missing seed problems: {sorted(set(SEED_FILES) - seeds)}"


def test_lowp_has_both_dtypes():
    lowp = [p for p in FILES if _category(p) == "lowp"]
    fp16 = [p for p in lowp if "torch.float16" in p.read_text()]
    bf16 = [p for p in lowp if "torch.bfloat16" in p.read_text()]
    assert len(fp16) >= 3, f"only {len(fp16)} fp16 problems in lowp/"
    assert len(bf16) >= 3, f"only {len(bf16)} bf16 problems in lowp/"


def test_readme_lists_every_problem():
    readme = (PROBLEMS / "README.md").read_text()
    listed = set(re.findall(r"^\|\s*\[?`([\w/]+\.py)`", readme, flags=re.MULTILINE))
    files = {_rel(p) for p in FILES}
    assert files - listed == set(), f"problems missing from problems/README.md: {sorted(files - listed)}"
    assert listed - files == set(), f"README rows with no file: {sorted(listed - files)}"


def test_readmes_count_and_categories_match_the_corpus():
    """The README's problem count and problems/README.md's category table follow the corpus."""
    import re

    root = Path(__file__).resolve().parents[1]
    files = [p for p in (root / "problems").rglob("*.py") if p.name != "__init__.py"]
    seeds = [p for p in files if p.parent.name == "seeds"]
    stated = re.search(r"the four seed\s+problems and (\d+) more", (root / "README.md").read_text())
    assert stated and int(stated.group(1)) == len(files) - len(seeds)
    rows = re.findall(r"^\| `(\w+)` \|", (root / "problems" / "README.md").read_text(), flags=re.M)
    assert len(rows) == len(set(rows)) and set(rows) == {p.parent.name for p in files}
