"""Candidate extraction from replies (.txt/.md) and plain .py files."""
from pathlib import Path

import pytest

from torchweld.judge.extract import CandidateError, extract_source, fenced_blocks, load_candidate

SEEDS = Path(__file__).parent / "fixtures" / "judge" / "seeds"


def test_last_python_block_defining_modelnew_wins():
    text = ("intro\n```python\nclass ModelNew: pass  # first try\n```\nmore\n```cpp\nclass ModelNew {};\n```\n"
            "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n```\n```python\nbatch_size = 1\n```\n")
    src, block, n = extract_source(text)
    assert "import torch" in src and block.index == 3 and n == 4
    assert block.line == 10  # the block's first code line in the reply


def test_unlabelled_and_tilde_fences_and_unclosed_block():
    assert "ModelNew" in extract_source("~~~\nclass ModelNew:\n  pass\n~~~\n")[0]
    src, block, _ = extract_source("text\n```\nclass ModelNew:\n    pass\n")  # cut-off reply
    assert src.strip().endswith("pass") and block.line == 3


def test_indented_block_is_dedented():
    src, _, _ = extract_source("1. code:\n   ```python\n   class ModelNew:\n       pass\n   ```\n")
    assert src.startswith("class ModelNew")


def test_no_modelnew_is_a_clear_error():
    with pytest.raises(CandidateError, match="no fenced python block defines class ModelNew"):
        extract_source("```python\nclass Model: pass\n```\n", "reply.md")


def test_py_file_is_used_as_is(tmp_path):
    p = tmp_path / "cand.py"
    p.write_text("class ModelNew: pass\n")
    c = load_candidate(p)
    assert c.source == "class ModelNew: pass\n" and c.block is None and c.extracted_from is None


def test_reply_file_reports_its_block(tmp_path):
    p = tmp_path / "reply.md"
    p.write_text("hi\n```python\nclass ModelNew: pass\n```\n")
    c = load_candidate(p)
    assert c.extracted_from == "reply.md: fenced block 1 of 1 (python), line 3"


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        load_candidate("/nonexistent/reply.txt")


@pytest.mark.skipif(not SEEDS.is_dir(), reason="seed documents not present")
@pytest.mark.parametrize("seed,line", [("000", 511), ("001", 413), ("002", 1739), ("004", 555)])
def test_seed_replies(seed, line):
    path = next(SEEDS.glob(f"{seed}_*.txt"))
    c = load_candidate(path)
    assert "class ModelNew" in c.source and "load_inline" in c.source
    assert c.block.line == line
    compile(c.source, str(path), "exec")
    if seed == "004":  # its reply ends with a second block (get_inputs) that must not be taken
        assert c.block.index == 1 and c.n_blocks == 2


def test_fenced_blocks_order():
    blocks = fenced_blocks("```py\na\n```\n````python\nb\n```\nc\n````\n")
    assert [b.code for b in blocks] == ["a\n", "b\n```\nc\n"]
