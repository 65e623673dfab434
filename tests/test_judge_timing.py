"""The judge's timer on a simulated GPU (host and device timelines, or a fake CUDA), no CUDA needed."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from torchweld.judge.timing import Timer, medians
from torchweld.runtime import site_timing as runtime_timing


class SimGPU:
    """A host that queues work and a device that runs it in order: an event's time is when the device
    reaches it, so host time spent launching shows only where the device has nothing queued."""

    def __init__(self):
        self.host = self.device = 0.0

    def queue(self, host_ms: float, device_ms: float):
        self.host += host_ms
        self.device = max(self.device, self.host) + device_ms

    def synchronize(self):
        self.host = self.device = max(self.host, self.device)

    def event(self):
        return {}

    def record(self, ev):
        self.queue(0.0, 0.0)
        ev["t"] = self.device

    def elapsed_time(self, s, e):
        return e["t"] - s["t"]


def sim_timer(gpu: SimGPU) -> Timer:
    timer = Timer.__new__(Timer)  # no CUDA: the flush becomes 0.03 ms of queued device work
    timer.clocks, timer.cpu = gpu, False
    timer.flush = lambda: gpu.queue(0.001, 0.03)
    return timer


def test_fresh_and_seen_calls_start_alike_after_queued_reference_work():
    gpu = SimGPU()
    timer = sim_timer(gpu)
    launch_bound = lambda *a: gpu.queue(0.12, 0.03)  # 0.12 ms of host launches, 0.03 ms of kernels
    for fresh_first in (False, True):
        gpu.queue(0.01, 0.5)  # the reference on the new inputs, not synchronised
        seen_ms, fresh_ms, _ = timer.pair(launch_bound, (), (), fresh_first)
        assert abs(seen_ms - fresh_ms) < 1e-9, (fresh_first, seen_ms, fresh_ms)
        assert seen_ms > 0.1  # the host's launch time shows, as in the interleaved run


def test_the_simulation_shows_the_bias_pair_removes():
    # Timed the old way, right after queued reference work, the first call hides its launches.
    gpu = SimGPU()
    timer = sim_timer(gpu)
    launch_bound = lambda *a: gpu.queue(0.12, 0.03)
    gpu.queue(0.01, 0.5)
    first, _ = timer.one(launch_bound, ())
    second, _ = timer.one(launch_bound, ())
    assert first < 0.05 < 0.1 < second


# ---- one timer: the judge's Timer, the first check's medians and the emitted files' _tw_time -------------

class FakeCUDA:
    """Just enough of `torch` for runtime/site_timing.py and the Timer on the CPU: a device clock that calls
    advance, events that read it, and buffers that remember their size."""

    int32 = "int32"

    def __init__(self, l2: int | None):
        self.l2, self.now, self.buffers = l2, 0.0, []
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = fake.now

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.t - self.t

        self.cuda = SimpleNamespace(Event=Event, synchronize=lambda: None, get_device_properties=self.properties)

    def properties(self, device):
        return SimpleNamespace(L2_cache_size=self.l2) if self.l2 is not None else SimpleNamespace()

    def empty(self, n, dtype=None, device=None):
        buf = SimpleNamespace(numel=n, dtype=dtype, zero_=lambda: None)
        self.buffers.append(buf)
        return buf

    def clocks(self):
        """The judge's clocks (guards.RealClocks' interface) on this device clock."""
        return SimpleNamespace(event=lambda: self.cuda.Event(True), record=lambda e: e.record(),
                               elapsed_time=lambda s, e: s.elapsed_time(e), synchronize=lambda: None,
                               perf_counter=lambda: self.now / 1e3)

    def call(self, durations):
        """A function whose calls take the given times in turn."""
        it = iter(durations)

        def run(*args):
            self.now += next(it)
        return run


@pytest.fixture
def fake_torch(monkeypatch):
    def make(l2=40 << 20):
        fake = FakeCUDA(l2)
        monkeypatch.setattr(runtime_timing, "torch", fake)
        return fake
    return make


A = [9.0, 5.0, 1.0, 4.0, 2.0, 3.0, 7.0, 6.0]  # a warm-up call, then 7 timed ones (median 4)
B = [9.0, 0.5, 0.9, 0.7, 0.1, 0.3, 0.2, 0.8]  # median 0.5


@pytest.mark.parametrize("l2", [40 << 20, None])
def test_the_judges_timer_flushes_and_takes_the_median_as_tw_time_does(fake_torch, l2):
    fake = fake_torch(l2)
    tw = runtime_timing._tw_time([fake.call(A), fake.call(B)], 0)
    tw_flush = fake.buffers[-1].numel
    timer = Timer(fake.clocks(), min_runs=7, min_s=0.0, max_runs=7, warmup=1, device=0)
    timed = timer.interleaved({"a": fake.call(A), "b": fake.call(B)}, [()])
    assert tw == [timed["a"].median, timed["b"].median] == [4.0, 0.5]
    assert timer.flush_buf.numel == tw_flush == runtime_timing.flush_buffer(0).numel == 2 * (l2 or 64 << 20) // 4
    assert timer.l2_bytes == runtime_timing.l2_bytes(0)


def test_the_median_of_an_even_count_is_a_measured_time(fake_torch):
    fake = fake_torch()
    timer = Timer(fake.clocks(), min_runs=4, min_s=0.0, max_runs=4, warmup=1, device=0)
    timed = timer.interleaved({"a": fake.call([0.0, 1.0, 4.0, 2.0, 3.0])}, [()])
    assert timed["a"].median == runtime_timing.median([1.0, 4.0, 2.0, 3.0]) == 3.0
    assert timed["a"].half_median() == 3.0  # the second half, [2, 3]


def test_medians_warms_each_input_set_then_runs_exactly_runs_interleaved(fake_torch):
    fake = fake_torch()
    calls = []

    def fn(label, ms):
        def run(x):
            calls.append((label, x))
            fake.now += ms
        return run

    got = medians({"eager": fn("eager", 2.0), "new": fn("new", 1.0)}, [(0,), (1,), (2,)], runs=5,
                  clocks=fake.clocks(), device=0)
    assert got == {"eager": 2.0, "new": 1.0}
    warm, timed = calls[:6], calls[6:]
    assert warm == [("eager", 0), ("eager", 1), ("eager", 2), ("new", 0), ("new", 1), ("new", 2)]
    assert len(timed) == 10 and [label for label, _ in timed[:4]] == ["eager", "new", "new", "eager"]
    assert [x for label, x in timed if label == "new"] == [0, 1, 2, 0, 1]  # inputs rotated


def test_first_py_has_no_timer_of_its_own():
    from torchweld.judge import first

    text = Path(first.__file__).read_text()
    for word in ("Event", "elapsed_time", "L2_cache_size", "flush"):
        assert word not in text, word
    assert first.medians is medians
