"""Candidate loading: a `.py` file as is, or the last fenced block defining `ModelNew` in a reply."""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w.+-]*)")
_MODELNEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.M)
_PY_LANGS = {"", "python", "py", "python3"}


class CandidateError(Exception):
    """The candidate file cannot be read or holds no code defining `ModelNew`."""


@dataclass(frozen=True)
class Block:
    index: int  # 1-based, among all fenced blocks in the reply
    lang: str
    line: int  # 1-based line of the block's first code line
    code: str


@dataclass(frozen=True)
class Candidate:
    path: Path
    source: str
    block: Block | None  # None when the file was Python already
    n_blocks: int = 0

    @property
    def extracted_from(self) -> str | None:
        if self.block is None:
            return None
        b = self.block
        return f"{self.path.name}: fenced block {b.index} of {self.n_blocks} ({b.lang or 'no language'}), line {b.line}"


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced code block, in order; an unclosed last block runs to the end (cut-off replies)."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group("fence"), m.group("lang").lower()
        start, j = i + 1, i + 1
        # NOTE: a closing fence is the same character, at least as long, and nothing after it.
        while j < len(lines) and not re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[j]):
            j += 1
        code = textwrap.dedent("\n".join(lines[start:j]))
        blocks.append(Block(index=len(blocks) + 1, lang=lang, line=start + 1, code=code + "\n"))
        i = j + 1
    return blocks


def extract_source(text: str, name: str = "reply") -> tuple[str, Block, int]:
    """The last Python (or unlabelled) fenced block whose code defines `class ModelNew`."""
    blocks = fenced_blocks(text)
    hits = [b for b in blocks if b.lang in _PY_LANGS and _MODELNEW.search(b.code)]
    if not hits:
        py = sum(b.lang in _PY_LANGS for b in blocks)
        raise CandidateError(
            f"{name}: no fenced python block defines class ModelNew ({len(blocks)} fenced blocks, {py} python)")
    return hits[-1].code, hits[-1], len(blocks)


def load_candidate(path) -> Candidate:
    """Read a candidate: `.py` as is; anything else (`.txt`, `.md`, ...) as a reply to extract from."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    text = path.read_text(errors="replace")
    if not text.strip():
        raise CandidateError(f"{path}: the file is empty")
    if path.suffix == ".py":
        return Candidate(path=path, source=text, block=None)
    source, block, n = extract_source(text, str(path))
    return Candidate(path=path, source=source, block=block, n_blocks=n)
