"""The judge's trust boundary on the CPU: the whole protocol (the candidate in its own process, tensors by
shared memory, the trusted side's clock and verdict) run on CPU tensors with pure-PyTorch candidates.
Each hole of issue 18 has a fixture that exploits it (tests/fixtures/judge/trust/) and is caught by name."""
from pathlib import Path

import pytest

from torchweld.judge import EXIT_CODES, CheckOptions, check

HERE = Path(__file__).parent / "fixtures" / "judge" / "trust"
PROBLEM = HERE / "problem_cpu.py"
FAST = dict(device="cpu", timing_min_s=0.02, timing_runs=10, max_variants=2, trials=3, stream_probes=2,
            fresh_sets=2, timeout_s=200)


def judge(candidate, **opts):
    return check(PROBLEM, candidate, CheckOptions(**{**FAST, **opts}))


def caught_by(r):
    return r["outcome"], (r["cheats"][0]["check"] if r["cheats"] else None)


def test_the_honest_candidate_passes_every_stage_in_its_own_process():
    r = judge(HERE / "honest_cpu.py")
    assert r["outcome"] == "correct", (r["message"], r["details"])
    assert r["cheats"] == [] and r["device"] == "cpu" and r["sandbox"]
    t = r["timing"]
    assert t["candidate_ms"] > 0 and t["wall_ms"] is not None and t["round_trip_ms"] > 0
    assert list(r["stage_s"]) == ["start", "build", "weights", "correctness", "generalization", "timing"]


@pytest.mark.parametrize("fixture, outcome, check_name", [
    ("patch_judge", "cheat", "judge_patch"),  # patches compare / median / Timer.one
    ("stack_timing", "cheat", "timed_output"),  # behaves differently where its stack says it is timed
    ("rng_patch", "cheat", "rng_patch"),  # makes get_inputs' generators return zeros
    ("hook_reference", "cheat", "module_hook"),  # hooks the reference's forward to take its output
    ("precision_in_call", "cheat", "precision_in_call"),  # TF32 on only while its forward runs
    ("forged_timing", "cheat", "timing_forged"),  # its process reports a tenth of its real call time
    ("gc_reference", "wrong", None),  # zeros the reference's weights found through gc: none in its process
])
def test_each_hole_is_caught_by_name(fixture, outcome, check_name):
    r = judge(HERE / f"{fixture}.py")
    assert caught_by(r) == (outcome, check_name), (r["message"], r["details"])


def test_its_own_verdict_is_never_taken():
    # NOTE: the result goes down a pipe, so the files it writes are nobody's result; its zeros are wrong.
    r = judge(HERE / "own_verdict.py")
    assert caught_by(r) == ("wrong", None), r["message"]


def test_a_verdict_written_over_the_result_file_is_seen(tmp_path):
    """Where the trusted child writes a file (in-process use), bytes it did not write there are forged_result."""
    from torchweld.judge import child

    (tmp_path / "c.py").write_text((HERE / "own_verdict.py").read_text().replace(
        'glob.glob("/tmp/torchweld-judge-*/result.json")', repr([str(tmp_path / "result.json")])))
    o = CheckOptions(**{**FAST, "timing": False})
    r = child.judge([str(PROBLEM), str(tmp_path / "c.py"), o.to_json(), str(tmp_path / "result.json")], key=b"k")
    assert caught_by(r) == ("cheat", "forged_result"), r["message"]


def test_a_patched_comparison_changes_nothing_on_the_trusted_side():
    r = judge(HERE / "patch_judge.py", anti_cheat=False)
    assert r["outcome"] == "wrong" and "all zeros" in r["message"]


def test_no_kernel_of_its_own_under_require_kernel():
    r = judge(HERE / "honest_cpu.py", require_kernel=True, timing=False)
    assert r["outcome"] == "no_kernel" and EXIT_CODES["no_kernel"] == 17 and "--require-kernel" in r["message"]
    assert EXIT_CODES["decoy_kernel"] == 16


HONEST = (HERE / "honest_cpu.py").read_text()
CATALOGUE = {
    "threads": ("import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
                "", "threads"),
    "child_process": ("import subprocess\n_p = subprocess.Popen(['sleep', '60'])\n", "", "subprocess"),
    "timer_patch": ("import time\n_pc = time.perf_counter\ntime.perf_counter = lambda: _pc() / 2\n", "",
                    "timer_patch"),
    "tf32_at_import": ("torch.backends.cudnn.allow_tf32 = True\n", "", "tf32_flags"),
    "mutate_input": ("", "x.mul_(1.0001)\n        ", "input_mutation"),
    "output_pool": ("_POOL = {}\n", "y = F.relu(F.conv2d(x, self.conv.weight, self.conv.bias)) + self.bias\n"
                    "        buf = _POOL.setdefault(tuple(y.shape), torch.empty_like(y))\n"
                    "        return buf.copy_(y)\n        ", "output_reuse"),
    "input_cache_address": ("_CACHE = {}\n", "key = x.data_ptr()\n        if key in _CACHE:\n"
                            "            return _CACHE[key].clone()\n        _CACHE[key] = "
                            "F.relu(F.conv2d(x, self.conv.weight, self.conv.bias)) + self.bias\n        ",
                            "input_cache"),
    "calls_reference": ("class Model(nn.Module):\n    def __init__(self, conv, bias):\n        super().__init__()\n"
                        "        self.conv, self.bias = conv, bias\n    def forward(self, x):\n"
                        "        return F.relu(self.conv(x)) + self.bias\n",
                        "return Model(self.conv, self.bias)(x)\n        ", "calls_reference"),
    "lazy_subclass": ("class Lazy(torch.Tensor):\n    pass\n",
                      "return (F.relu(F.conv2d(x, self.conv.weight, self.conv.bias)) + self.bias).as_subclass(Lazy)\n"
                      "        ", "lazy_subclass"),
}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_catalogue_is_still_caught_across_the_boundary(name, tmp_path):
    top, body, check_name = CATALOGUE[name]
    head, tail = HONEST.split("\n\nclass ModelNew", 1)
    tail = tail.replace("        return F.relu(", "        " + body + "return F.relu(", 1)
    src = head + "\n" + top + "\n\nclass ModelNew" + tail
    (tmp_path / f"{name}.py").write_text(src)
    r = judge(tmp_path / f"{name}.py", timing=False)
    assert caught_by(r) == ("cheat", check_name), (r["message"], r["details"])


PROBE = '''
import json, os, resource, socket
import torch.nn as nn

seen = {"secret": os.environ.get("TORCHWELD_TEST_SECRET"), "home": os.environ.get("HOME"), "cwd": os.getcwd(),
        "cpu_limit": resource.getrlimit(resource.RLIMIT_CPU)[1], "core": resource.getrlimit(resource.RLIMIT_CORE)[1]}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    seen["net"] = "connected"
except OSError as e:
    seen["net"] = type(e).__name__
raise RuntimeError("SEEN" + json.dumps(seen))


class ModelNew(nn.Module):
    pass
'''


def test_the_candidates_process_sees_no_secret_and_its_own_scratch(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("TORCHWELD_TEST_SECRET", "sk-do-not-leak")
    (tmp_path / "probe.py").write_text(PROBE)
    r = judge(tmp_path / "probe.py")
    assert r["outcome"] == "no_build", r["message"]
    seen = json.loads(r["message"].split("SEEN", 1)[1])
    assert seen["secret"] is None
    assert seen["cwd"] == seen["home"] and "torchweld-candidate-" in seen["cwd"]
    assert 0 < seen["cpu_limit"] <= FAST["timeout_s"] + 5 and seen["core"] == 0
    if "unshare" in r["sandbox"] or "bubblewrap" in r["sandbox"]:
        assert seen["net"] != "connected"


DAEMON = '''
import os, time
import torch.nn as nn

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            open({mark!r}, "a").write("x")
            time.sleep(0.05)
    os._exit(0)
time.sleep(0.3)


class ModelNew(nn.Module):
    pass
'''


def test_nothing_the_candidate_started_outlives_the_check(tmp_path):
    import time

    mark = tmp_path / "alive"
    (tmp_path / "daemon.py").write_text(DAEMON.replace("{mark!r}", repr(str(mark))))
    judge(tmp_path / "daemon.py", timing=False)
    time.sleep(0.3)
    size = mark.stat().st_size if mark.exists() else 0
    time.sleep(0.5)
    assert (mark.stat().st_size if mark.exists() else 0) == size


def test_a_hang_is_a_timeout_and_the_candidates_process_goes(tmp_path):
    import time

    mark = tmp_path / "alive"
    (tmp_path / "hang.py").write_text(HONEST.replace("    def forward(self, x):\n", "    def forward(self, x):\n"
                                      "        import time\n        while True:\n"
                                      f"            open({str(mark)!r}, 'a').write('x')\n"
                                      "            time.sleep(0.05)\n", 1))
    r = judge(tmp_path / "hang.py", timing=False, timeout_s=12)
    assert r["outcome"] == "timeout" and "correctness" in r["message"], r["message"]
    size = mark.stat().st_size
    time.sleep(0.5)
    assert mark.stat().st_size == size


def test_a_result_without_the_judges_signature_is_forged(tmp_path):
    from torchweld.judge.child import sign
    from torchweld.judge.parent import verified

    import json

    key, body = b"k" * 64, {"outcome": "correct", "message": "x"}
    line = json.dumps({"result": body, "sig": sign(key, body)}).encode()
    assert verified([b"{}", line], key) == body
    assert verified([line, json.dumps({"result": body, "sig": sign(b"guess", body)}).encode()],
                    key)["forged"]["check"] == "forged_result"
    assert verified([json.dumps(body).encode()], key)["forged"]["check"] == "forged_result"
    assert verified([], key) == {}
    assert verified([line, line[:20]], key) == body  # the last line cut off by a kill


def test_pytorchs_own_rebinding_of_manual_seed_is_no_rng_patch():
    """Importing torch._dynamo (a build or torch.compile does, after the snapshot) rebinds torch.manual_seed:
    on the GPU every honest candidate was caught as rng_patch. A candidate's own rebinding still is."""
    import subprocess
    import sys

    def tripped(after: str) -> str:
        code = f"from torchweld.judge.tripwires import Tripwires\nt = Tripwires('x.py')\n{after}\n" \
               "print([c['check'] for c in t.tripped('after')])"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[1]).stdout.strip()

    assert tripped("import torch._dynamo") == "[]"
    assert tripped("import torch\ntorch.manual_seed = lambda s: None") == "['rng_patch']"
