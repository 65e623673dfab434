"""The judge's timer on a simulated GPU (host and device timelines), no CUDA needed."""
from torchweld.judge.timing import Timer


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
    timer.clocks = gpu
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
