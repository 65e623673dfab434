"""Rendering from saved results: html/md/png written, every problem shown, compiler output escaped."""
import json
import shutil
import sys
from pathlib import Path

import pytest

from torchweld.bench.report import rerender, write_reports
from torchweld.bench.tasks import load_results

FIXTURE = Path(__file__).parent / "fixtures" / "bench"
META = {"date": "2025-01-02T03:04:05+00:00", "device": "NVIDIA H100 80GB HBM3", "torch": "2.5.1",
        "command": "torchweld bench problems --candidates cands", "git": "abc123", "problems": "problems"}


@pytest.fixture()
def out(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "run")
    return tmp_path / "run"


def test_reports_written_and_complete(out):
    results = load_results(out)
    w = write_reports(out, results, META)
    html, md = w.report_html.read_text(), w.summary_md.read_text()
    for r in results:
        assert r["name"] in html and r["name"] in md
    for text in (html, md):
        assert "NVIDIA H100 80GB HBM3" in text and "2.5.1" in text and "torchweld bench problems --candidates cands" in text
    assert "46.2%" in html and "2.17x" in html and "1.24x" in html and "23.1%" in html  # the four cards
    assert "fast_1.5" in md and "| conv | 4 | 2 | 1.26x | 0.98x | 25.0% |" in md
    saved = json.loads(w.results_json.read_text())
    assert saved["meta"]["git"] == "abc123" and len(saved["results"]) == 13
    assert saved["metrics"]["fast"]["compile"]["fast_1"] == pytest.approx(3 / 13)


def test_html_escapes_result_text(out):
    w = write_reports(out, load_results(out), META)
    html = w.report_html.read_text()
    assert '<script>alert("x")</script>' not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "<b>markup</b>" not in html
    assert html.count("<script>") == 1  # only our own inline sorter
    assert "http://" not in html and "https://" not in html  # self-contained
    md = w.summary_md.read_text()
    assert "<script>" not in md and "&lt;script&gt;" in md


def test_plot_png_embedded(out):
    pytest.importorskip("matplotlib")
    w = write_reports(out, load_results(out), META)
    assert w.speedups_png is not None and w.speedups_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64," in w.report_html.read_text()
    assert w.notes == ()


def test_plot_without_any_timings(tmp_path):
    pytest.importorskip("matplotlib")
    w = write_reports(tmp_path, [{"name": "x", "category": "root", "outcome": "wrong", "message": "no"}], {})
    assert w.speedups_png is not None and w.speedups_png.is_file()


def test_without_matplotlib_still_html_and_md(out, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import` raise ImportError
    (out / "speedups.png").write_bytes(b"stale")
    w = write_reports(out, load_results(out), META)
    assert w.speedups_png is None and not (out / "speedups.png").exists()
    assert w.report_html.is_file() and w.summary_md.is_file()
    assert any("matplotlib" in n for n in w.notes)
    assert "matplotlib is not installed" in w.summary_md.read_text()
    assert "data:image/png" not in w.report_html.read_text()


def test_rerender_from_results_json_alone(out, tmp_path):
    write_reports(out, load_results(out), META)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "results.json", alone / "results.json")
    w = rerender(alone)
    assert "conv2d_relu" in w.report_html.read_text()
    assert json.loads(w.results_json.read_text())["meta"]["device"] == "NVIDIA H100 80GB HBM3"


def test_empty_results_render(tmp_path):
    w = write_reports(tmp_path, [], {})
    assert "0/0 correct" in w.summary_md.read_text()
    assert w.report_html.is_file()
