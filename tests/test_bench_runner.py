"""The bench runner over tiny problem files, with a fake judge and compiler injected (CPU only)."""
import argparse
import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from torchweld.bench import runner
from torchweld.bench.tasks import find_candidate, find_problems, plan_tasks
from torchweld.bench.prewarm import compiler_fingerprint
from torchweld.bench.runner import BenchOptions, run_bench

PROBLEM = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n" \
          "def get_inputs():\n    return [torch.ones(2)]\n\ndef get_init_inputs():\n    return []\n"


def fake_check(problem, candidate, opts):
    """Judges by a marker in the candidate's text; records what it saw so tests can check plumbing."""
    text = Path(candidate).read_text()
    if "EXIT" in text:
        os._exit(3)  # a candidate that takes the worker process down with it
    outcome = "correct" if "good" in text else "wrong"
    return {
        "problem": str(problem), "name": Path(problem).stem, "candidate": str(candidate), "outcome": outcome,
        "message": f"fake {outcome}", "details": [f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}",
                                                   f"timeout={getattr(opts, 'timeout_s', getattr(opts, 'timeout', None))}", f"pid={os.getpid()}",
                                                   f"judges_dir={getattr(opts, 'judges_dir', None)}",
                                                   f"gpu_lock={getattr(opts, 'gpu_lock', None)}",
                                                   f"env={sorted(k for k in os.environ if k.startswith('TORCHWELD_'))}"],
        "build_s": 1.0, "correctness": [], "generalization": [], "cheats": [], "static": [],
        "timing": {"eager_ms": 2.0, "compile_ms": 1.0, "candidate_ms": 0.5, "compile_build_s": 3.0,
                   "speedup_vs_eager": 4.0, "speedup_vs_compile": 2.0, "candidate_ms_repeat": [0.5],
                   "method": "fake"} if outcome == "correct" else None,
        "device": "FakeGPU", "torch": "0.0", "precision": "fp32", "extracted_from": None,
    }


def fake_compile(problem, out_path):
    if "bad" in Path(problem).stem:
        raise ValueError("cannot fuse <this>\nsecond line of the compiler's complaint")
    Path(out_path).write_text("# good ModelNew\n")
    return Path(out_path)


class Counting:
    """Wraps fake_check to count calls (inline mode only: the same process)."""

    def __init__(self):
        self.seen = []

    def __call__(self, problem, candidate, opts):
        self.seen.append(Path(problem).stem)
        return fake_check(problem, candidate, opts)


@pytest.fixture()
def tree(tmp_path):
    probs = tmp_path / "problems"
    for rel in ("top.py", "conv/c1.py", "conv/deep/c2_bad.py"):
        (probs / rel).parent.mkdir(parents=True, exist_ok=True)
        (probs / rel).write_text(PROBLEM)
    (probs / "__init__.py").write_text("")
    (probs / "conv" / "helpers.py").write_text("def f():\n    return 1\n")  # no Model: not a problem
    (probs / "__pycache__").mkdir()
    (probs / "__pycache__" / "top.py").write_text(PROBLEM)
    cands = tmp_path / "cands"
    (cands / "conv").mkdir(parents=True)
    (cands / "top.md").write_text("```python\n# good\n```\n")  # flat, as a markdown reply
    (cands / "conv" / "c1.py").write_text("# wrong\n")  # same relative path
    (cands / "c1.py").write_text("# good\n")  # the nested one wins over this
    return tmp_path


def opts(tree, **kw):
    base = dict(problems=tree / "problems", out=tree / "out", candidates=tree / "cands", command="torchweld bench t")
    base.update(kw)
    return BenchOptions(**base)


def quiet():
    return Console(file=open(os.devnull, "w"), force_terminal=False)


def saved(tree, key):
    return json.loads((tree / "out" / "results" / f"{key}.json").read_text())


def test_discovery_and_categories(tree):
    root = tree / "problems"
    found = [p.relative_to(root).as_posix() for p in find_problems(root)]
    assert found == ["conv/c1.py", "conv/deep/c2_bad.py", "top.py"]
    tasks = {t.stem: t for t in plan_tasks(root, find_problems(root), tree / "cands", None)}
    assert tasks["top"].category == "root" and tasks["top"].key == "root__top"
    assert tasks["c2_bad"].category == "conv/deep" and tasks["c2_bad"].key == "conv__deep__c2_bad"
    assert [p.stem for p in find_problems(root, pattern="conv/*")] == ["c1", "c2_bad"]
    assert [p.stem for p in find_problems(root, pattern="*bad")] == ["c2_bad"]


def test_candidate_mapping(tree):
    cands = tree / "cands"
    assert find_candidate(cands, Path("conv/c1.py")) == cands / "conv" / "c1.py"
    assert find_candidate(cands, Path("top.py")) == cands / "top.md"
    assert find_candidate(cands, Path("conv/deep/c2_bad.py")) is None
    (cands / "c2_bad.txt").write_text("good")
    assert find_candidate(cands, Path("conv/deep/c2_bad.py")) == cands / "c2_bad.txt"


def test_candidates_run_writes_results_and_reports(tree):
    check = Counting()
    assert run_bench(opts(tree), check=check, console=quiet(), spawn=False) == 0
    assert sorted(check.seen) == ["c1", "top"]  # c2_bad has no candidate: never judged
    assert saved(tree, "root__top")["outcome"] == "correct"
    assert saved(tree, "root__top")["bench"]["candidate"].endswith("top.md")
    assert saved(tree, "conv__c1")["outcome"] == "wrong"  # conv/c1.py, not the flat good one
    missing = saved(tree, "conv__deep__c2_bad")
    assert missing["outcome"] == "no_candidate" and missing["category"] == "conv/deep"
    out = tree / "out"
    for name in ("results.json", "summary.md", "report.html"):
        assert (out / name).is_file()
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["command"] == "torchweld bench t" and data["meta"]["device"] == "FakeGPU"
    assert len(data["results"]) == 3 and data["metrics"]["correct"] == 1
    assert "top" in (out / "report.html").read_text()
    # provenance by content: the hash of the sources that judged each result, and the run's
    assert data["meta"]["torchweld"] == compiler_fingerprint() == saved(tree, "root__top")["bench"]["torchweld"]


def test_resume_skips_finished(tree):
    first = Counting()
    run_bench(opts(tree), check=first, console=quiet(), spawn=False)
    again = Counting()
    assert run_bench(opts(tree), check=again, console=quiet(), spawn=False) == 0
    assert again.seen == []
    (tree / "out" / "results" / "conv__c1.json").unlink()
    (tree / "out" / "results" / "root__top.json").write_text("{not json")  # torn write: redo it
    run_bench(opts(tree), check=again, console=quiet(), spawn=False)
    assert sorted(again.seen) == ["c1", "top"]
    redo = Counting()
    run_bench(opts(tree, resume=False), check=redo, console=quiet(), spawn=False)
    assert sorted(redo.seen) == ["c1", "top"]
    # a different candidate for a finished problem is judged afresh, not skipped
    (tree / "cands" / "conv" / "c1.py").unlink()
    changed = Counting()
    run_bench(opts(tree), check=changed, console=quiet(), spawn=False)
    assert changed.seen == ["c1"] and saved(tree, "conv__c1")["outcome"] == "correct"


def test_compile_mode_with_compile_error(tree):
    check = Counting()
    o = opts(tree, candidates=None, compile=True, timeout=7.0)
    assert run_bench(o, check=check, compile_fn=fake_compile, console=quiet(), spawn=False) == 0
    out = tree / "out"
    assert (out / "candidates" / "root" / "top.py").read_text() == "# good ModelNew\n"
    assert (out / "candidates" / "conv" / "c1.py").is_file()
    bad = saved(tree, "conv__deep__c2_bad")
    assert bad["outcome"] == "compile_error" and bad["message"] == "ValueError: cannot fuse <this>"
    assert any("second line" in d for d in bad["details"])
    assert saved(tree, "conv__c1")["outcome"] == "correct"
    assert "timeout=7.0" in saved(tree, "root__top")["details"]
    assert "cannot fuse &lt;this&gt;" in (out / "report.html").read_text()
    again = Counting()
    run_bench(o, check=again, compile_fn=fake_compile, console=quiet(), spawn=False)
    assert again.seen == []


def test_ctrl_c_keeps_what_is_done(tree):
    def interrupting(problem, candidate, opts):
        if Path(problem).stem == "top":
            raise KeyboardInterrupt
        return fake_check(problem, candidate, opts)

    assert run_bench(opts(tree), check=interrupting, console=quiet(), spawn=False) == 130
    assert saved(tree, "conv__c1")["outcome"] == "wrong"
    assert not (tree / "out" / "results" / "root__top.json").exists()
    assert json.loads((tree / "out" / "results.json").read_text())["meta"]["interrupted"] is True
    rest = Counting()
    assert run_bench(opts(tree), check=rest, console=quiet(), spawn=False) == 0
    assert rest.seen == ["top"]


def test_worker_processes_pinned_and_crash_recorded(tree):
    """Real spawned workers on two pretend GPUs; one candidate kills its worker, which is replaced."""
    (tree / "cands" / "conv" / "c1.py").write_text("# EXIT\n")
    (tree / "cands" / "c2_bad.py").write_text("# good\n")
    code = run_bench(opts(tree, gpus=2), check=fake_check, console=quiet(), devices=["5", "7"])
    assert code == 0
    crashed = saved(tree, "conv__c1")
    assert crashed["outcome"] == "runtime_error" and "exit code 3" in crashed["message"]
    for key in ("root__top", "conv__deep__c2_bad"):
        r = saved(tree, key)
        assert r["outcome"] == "correct"
        assert r["bench"]["gpu"] in ("5", "7")
        assert f"CUDA_VISIBLE_DEVICES={r['bench']['gpu']}" in r["details"]
        # two judges at once: the directory they pause each other through comes as an option, not from the environment
        assert f"judges_dir={tree / 'out' / 'locks' / 'judges'}" in r["details"] and "env=[]" in r["details"]
        assert "gpu_lock=None" in r["details"]  # one judge per GPU: no lock to take
    assert (tree / "out" / "logs" / "worker0.log").is_file()


def test_what_judges_share_travels_as_their_options(tree):
    seen = []

    def capturing(problem, candidate, opts):
        seen.append(opts)
        return fake_check(problem, candidate, opts)

    run_bench(opts(tree, per_gpu=2), check=capturing, console=quiet(), spawn=False, devices=[])
    locks = tree / "out" / "locks"
    assert seen and all(o.gpu_lock == str(locks / "gpu.lock") and o.judges_dir == str(locks / "judges") for o in seen)
    assert (locks / "judges").is_dir() and not any(k.startswith("TORCHWELD_") for k in os.environ)
    alone = []
    run_bench(opts(tree, resume=False), check=lambda p, c, o: alone.append(o) or fake_check(p, c, o), console=quiet(),
              spawn=False, devices=[])
    assert alone and all(o.gpu_lock is None and o.judges_dir is None for o in alone)


def test_gpu_slots():
    assert runner.gpu_slots(None, []) == [None]
    assert runner.gpu_slots(3, []) == [None, None, None]
    assert runner.gpu_slots(None, ["0", "1"]) == ["0", "1"]
    assert runner.gpu_slots(1, ["2", "3"]) == ["2"]
    assert isinstance(runner.gpu_slots(3, ["0"]), str)
    assert isinstance(runner.gpu_slots(0, []), str)


def parse(*argv):
    parser = argparse.ArgumentParser(prog="torchweld")
    runner.register(parser.add_subparsers(dest="cmd"))
    return parser.parse_args(["bench", *argv])


def test_cli_usage_errors(tree):
    assert parse("x").func is runner.run
    assert runner.run(parse(), console=quiet()) == 2  # no DIR
    assert runner.run(parse(str(tree / "nope"), "--compile"), console=quiet()) == 2
    assert runner.run(parse(str(tree / "problems")), console=quiet()) == 2  # neither source
    assert runner.run(parse(str(tree / "problems"), "--candidates", str(tree / "nope")), console=quiet()) == 2
    assert runner.run(parse(str(tree / "problems"), "--compile", "--filter", "zzz*"), console=quiet()) == 2
    with pytest.raises(SystemExit):
        parse(str(tree / "problems"), "--compile", "--candidates", str(tree / "cands"))
    args = parse(str(tree / "problems"), "--compile", "--no-resume", "--gpus", "2", "--timeout", "5",
                 "--out", str(tree / "o"), "--filter", "c*")
    assert (args.resume, args.gpus, args.timeout, args.filter) == (False, 2, 5.0, "c*")


def test_cli_report_only(tree):
    fixture = Path(__file__).parent / "fixtures" / "bench"
    import shutil

    shutil.copytree(fixture, tree / "saved")
    assert runner.run(parse("--report-only", str(tree / "saved")), console=quiet()) == 0
    assert (tree / "saved" / "report.html").is_file() and (tree / "saved" / "summary.md").is_file()
    assert runner.run(parse("--report-only", str(tree / "empty")), console=quiet()) == 2


def slow_check(problem, candidate, opts):
    """Hangs like a stuck judge, with a run in a session of its own (as the real judge starts them)."""
    import subprocess
    import time

    if "SLOW" in Path(candidate).read_text():
        child = subprocess.Popen(["sleep", "60"], start_new_session=True)
        Path(candidate).with_suffix(".pid").write_text(str(child.pid))
        time.sleep(60)
    return fake_check(problem, candidate, opts)


def test_hard_limit_kills_hung_judge_and_its_runs(tree):
    from torchweld.bench.gpu_pool import run_pool
    from torchweld.bench.worker import Job

    (tree / "cands" / "conv" / "c1.py").write_text("# SLOW\n")
    root = tree / "problems"
    tasks = [t for t in plan_tasks(root, find_problems(root), tree / "cands", None) if t.candidate]
    got = {}
    run_pool(tasks, Job(out=tree / "out", check=slow_check), [None], (lambda w, t: None,
             lambda w, t, r: got.__setitem__(t.stem, r)), hard_limit=1.5)
    assert got["c1"]["outcome"] == "timeout" and "killed" in got["c1"]["message"]
    assert got["top"]["outcome"] == "correct"  # the replacement worker carried on
    assert saved(tree, "conv__c1")["outcome"] == "timeout"
    pid = int((tree / "cands" / "conv" / "c1.pid").read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]:
            break
        import time

        time.sleep(0.1)
    else:
        pytest.fail("the judge's run outlived the killed worker")


def test_options_follow_the_judges_names():
    import dataclasses

    from torchweld.bench.worker import make_options

    @dataclasses.dataclass(frozen=True)
    class Opts:
        timeout_s: float = 600.0
        timing: bool = False
        trials: int = 5

    o = make_options(Opts, {"timeout": 5.0, "timing": True, "unknown": 1})
    assert (o.timeout_s, o.timing, o.trials) == (5.0, True, 5)
    ns = make_options(None, {"timeout": 5.0})
    assert ns.timeout == 5.0


def test_unusable_problem_is_a_result(tree):
    from torchweld.problem import ProblemError

    def refusing(problem, candidate, opts):
        raise ProblemError(f"{problem}: get_inputs() failed: boom")

    assert run_bench(opts(tree), check=refusing, console=quiet(), spawn=False) == 0
    r = saved(tree, "root__top")
    assert r["outcome"] == "bad_problem" and "boom" in r["message"]

    def buggy(problem, candidate, opts):
        raise AttributeError("judge bug")

    run_bench(opts(tree, resume=False), check=buggy, console=quiet(), spawn=False)
    assert saved(tree, "root__top")["outcome"] == "judge_error"


def test_judges_sharing_a_gpu_take_turns_through_its_lock(tmp_path):
    import fcntl
    import threading
    import time

    from torchweld.judge.check_options import CheckOptions
    from torchweld.judge.child import Judging

    lock = tmp_path / "gpu0.lock"
    opts = CheckOptions(gpu_lock=str(lock))
    w = Judging(str(tmp_path / "p.py"), str(tmp_path / "c.py"), opts, str(tmp_path / "result.json"))
    holder = open(lock, "a")
    fcntl.flock(holder, fcntl.LOCK_EX)  # another judge is on the GPU
    t = threading.Thread(target=w.take_gpu)
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), "took the GPU while another judge held it"
    assert w.r["stage"] == "waiting for the GPU"
    holder.close()  # that judge exits
    t.join(5)
    assert not t.is_alive()
    assert "waiting for the GPU" not in w.r["stage_s"]  # closed when the next stage starts
    w.stage("correctness")
    assert w.r["stage_s"]["waiting for the GPU"] >= 0.25


class NotRun(Counting):
    """The judge on a machine without a GPU: every candidate is checked and built, none is run."""

    def __call__(self, problem, candidate, opts):
        result = super().__call__(problem, candidate, opts)
        result.update(outcome="no_gpu", message="builds; not run: no GPU", timing=None, device=None)
        return result


def test_without_a_gpu_results_are_written_but_are_no_verdicts_and_never_resumed(tree):
    import io

    buf = io.StringIO()
    first = NotRun()
    assert run_bench(opts(tree), check=first, console=Console(file=buf, width=300), spawn=False, devices=[]) == 0
    said = buf.getvalue().splitlines()
    assert said[0].startswith("torchweld bench: no GPU here:")  # up front, before any judging
    assert sorted(first.seen) == ["c1", "top"] and saved(tree, "root__top")["outcome"] == "no_gpu"
    # c2_bad has no candidate: that one is a verdict; the two built ones count nowhere
    assert any(line.startswith("1 judged: 0 correct (0.0%)") and "2 not run: no GPU" in line for line in said)
    metrics = json.loads((tree / "out" / "results.json").read_text())["metrics"]
    assert (metrics["total"], metrics["correct"], metrics["not_run"]) == (1, 0, 2)
    summary = (tree / "out" / "summary.md").read_text()
    assert "**0/1 correct (0.0%)**" in summary and "0/3" not in summary
    assert "## Not run: no GPU (2)" in summary and "root/top**: builds; not run: no GPU" in summary
    assert "Not run: no GPU" in (tree / "out" / "report.html").read_text()
    again = NotRun()
    run_bench(opts(tree), check=again, console=quiet(), spawn=False, devices=[])
    assert sorted(again.seen) == ["c1", "top"]  # not resumed: nothing was judged
    on_gpu = Counting()
    run_bench(opts(tree), check=on_gpu, console=quiet(), spawn=False, devices=["0"])
    assert sorted(on_gpu.seen) == ["c1", "top"] and saved(tree, "root__top")["outcome"] == "correct"
    after = Counting()
    run_bench(opts(tree), check=after, console=quiet(), spawn=False, devices=["0"])
    assert after.seen == []  # verdicts now: resumed


def test_all_not_run_says_none_was_judged(tmp_path):
    from torchweld.bench.metrics import compute
    from torchweld.bench.report import headline

    results = [{"name": n, "category": "root", "outcome": "no_gpu", "message": "builds; not run: no GPU"}
               for n in ("a", "b")]
    m = compute(results)
    assert (m.total, m.correct, m.not_run) == (0, 0, 2) and m.failures == ()
    assert headline(m).startswith("2 problems, none judged: 2 not run: no GPU")
