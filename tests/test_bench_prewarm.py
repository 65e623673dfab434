"""`--prewarm`: cold times saved per problem, skipped when present, and shown in the tables."""
from __future__ import annotations

import json
from pathlib import Path

from torchweld.bench.format import rows
from torchweld.bench.tasks import Task
from torchweld.bench.prewarm import load_prewarm, prewarm, prewarm_path


def _task(tmp_path: Path) -> Task:
    return Task(problem=tmp_path / "p.py", rel="conv/p.py", category="conv", stem="p", candidate=tmp_path / "c.py")


def test_saved_records_are_skipped_and_loaded(tmp_path):
    task = _task(tmp_path)
    path = prewarm_path(tmp_path, task.key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"key": task.key, "compile_cold_s": 31.5, "candidate_build_cold_s": 2.25}))
    said = []
    assert prewarm([task], tmp_path, 4, None, say=said.append) == []  # nothing left: no process started
    assert not said
    assert load_prewarm(tmp_path)[task.key]["compile_cold_s"] == 31.5


def test_rows_show_cold_times():
    result = {"name": "p", "category": "conv", "outcome": "correct", "build_s": 0.3,
              "timing": {"eager_ms": 2.0, "compile_ms": 1.0, "candidate_ms": 0.8},
              "prewarm": {"candidate_build_cold_s": 2.25, "compile_cold_s": 31.5}}
    (row,) = rows([result])
    assert (row.build_s, row.build_cold_s, row.compile_cold_s) == (0.3, 2.25, 31.5)
    (bare,) = rows([dict(result, prewarm=None)])
    assert bare.build_cold_s is None and bare.compile_cold_s is None


def test_set_parses_judge_overrides():
    from torchweld.bench.runner import parse_settings
    from torchweld.bench.worker import make_options
    from torchweld.judge.check_options import CheckOptions

    pairs = parse_settings(["timing_min_s=0.5", "max_variants=6", "generalize=false", "tolerance=table"])
    assert pairs == [("timing_min_s", 0.5), ("max_variants", 6), ("generalize", False), ("tolerance", "table")]
    opts = make_options(CheckOptions, dict(pairs))
    assert (opts.timing_min_s, opts.max_variants, opts.generalize, opts.tolerance) == (0.5, 6, False, "table")


def test_candidate_compiled_by_prewarm_is_not_compiled_again(tmp_path):
    from torchweld.bench.prewarm import compiled_by_prewarm, compiled_path, compiler_fingerprint, file_sha

    task = _task(tmp_path)
    task.candidate.write_text("class ModelNew: pass\n")
    path = compiled_path(tmp_path, task.key)
    path.parent.mkdir(parents=True)
    record = {"key": task.key, "compiler": compiler_fingerprint(), "candidate_sha": file_sha(task.candidate)}
    path.write_text(json.dumps(record))
    assert compiled_by_prewarm(tmp_path, task.key, task.candidate)
    task.candidate.write_text("class ModelNew: pass  # edited since\n")
    assert not compiled_by_prewarm(tmp_path, task.key, task.candidate)
    path.write_text(json.dumps(dict(record, compiler="0" * 16, candidate_sha=file_sha(task.candidate))))
    assert not compiled_by_prewarm(tmp_path, task.key, task.candidate)  # another compiler made it


def test_resume_judges_again_a_candidate_whose_content_changed(tmp_path):
    from torchweld.bench.tasks import is_finished, results_path, write_json
    from torchweld.bench.prewarm import file_sha

    task = _task(tmp_path)
    task.candidate.write_text("class ModelNew: pass\n")
    saved = {"outcome": "correct", "bench": {"candidate": str(task.candidate), "compiled": False,
                                             "candidate_sha": file_sha(task.candidate)}}
    write_json(results_path(tmp_path, task.key), saved)
    assert is_finished(tmp_path, task)
    task.candidate.write_text("class ModelNew: pass  # a new compiler wrote this\n")
    assert not is_finished(tmp_path, task)
    task.candidate.unlink()
    assert not is_finished(tmp_path, task)
