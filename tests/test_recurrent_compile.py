"""Compile time grows about linearly with an unrolled recurrence, and a loop of identical steps prints
one kernel launched per step (issue 17: a 6-layer GRU over 512 steps did not compile in 5 minutes)."""
from __future__ import annotations

import re
import time

import torch
import torch.nn as nn

from torchweld.capture import capture
from torchweld.capture.recurrent import is_recurrence
from torchweld.ir import Graph, Node, Ref
from torchweld.plan import partition
from torchweld.problem import load_problem
from torchweld.pipeline import compile_problem

GRU_LOOP = '''"""A hand-written GRU cell over {steps} steps."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.x2g = nn.Linear(32, 96)
        self.h2g = nn.Linear(32, 96)

    def forward(self, x, h):
        for t in range(x.shape[1]):
            xr, xz, xn = self.x2g(x[:, t]).chunk(3, dim=1)
            hr, hz, hn = self.h2g(h).chunk(3, dim=1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            h = (1.0 - z) * torch.tanh(xn + r * hn) + z * h
        return h


def get_inputs():
    return [torch.randn(4, {steps}, 32), torch.randn(4, 32)]


def get_init_inputs():
    return []
'''

GRU_STACK = '''"""A 6-layer nn.GRU over 512 steps."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(64, 128, num_layers=6, batch_first=True)

    def forward(self, x):
        return torch.tanh(self.gru(x)[0]) * 2.0


def get_inputs():
    return [torch.randn(8, 512, 64)]


def get_init_inputs():
    return []
'''


def _compile(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    start = time.process_time()
    result = compile_problem(load_problem(path))
    return result, time.process_time() - start


def test_gru_stack_over_512_steps_is_one_library_call(tmp_path):
    result, seconds = _compile(tmp_path, "gru_stack", GRU_STACK)
    assert seconds < 20
    assert sum(is_recurrence(n) for n in result.plan.graph.nodes) == 1
    assert [k.kind for k in result.plan.kernels] == ["pointwise"]
    assert "torch.gru(" in result.source


def test_hand_written_gru_over_256_steps_prints_one_kernel(tmp_path):
    result, seconds = _compile(tmp_path, "gru_loop", GRU_LOOP.format(steps=256))
    assert seconds < 40  # NOTE: CPU time; it took minutes while the partition was quadratic
    assert len(result.plan.kernels) == 256  # each step's gate math is one kernel
    assert all(len(k.nodes) >= 8 for k in result.plan.kernels)
    assert len(re.findall(r"__global__", result.source)) == 2  # one kernel (its vector and scalar builds)
    calls = re.findall(r"= _(k\d+)\(", result.source)
    assert len(calls) == 256 and set(calls) == {"k0"}
    assert len(result.source.splitlines()) < 40 * 256


def _chain(steps: int) -> Graph:
    """A recurrence's shape without the library calls: each step a few pointwise ops on the last state
    and a fresh input (made by an aten op, so steps stay separate kernels)."""
    nodes = [Node("x0", "input", (), (64, 64), target="x"), Node("h0", "input", (), (64, 64), target="h")]
    h = "h0"
    for t in range(steps):
        mix = Node(f"m{t}", "aten", (Ref(h), Ref("x0")), (64, 64), target="aten.mm.default")
        a = Node(f"a{t}", "add", (Ref(f"m{t}"), Ref(h)), (64, 64))
        s = Node(f"s{t}", "sigmoid", (Ref(f"a{t}"),), (64, 64))
        n = Node(f"n{t}", "mul", (Ref(f"s{t}"), Ref(h)), (64, 64))
        nodes += [mix, a, s, n]
        h = f"n{t}"
    return Graph(tuple(nodes), (h,))


def test_partition_time_grows_about_linearly():
    small, big = _chain(250), _chain(2000)
    start = time.process_time()
    assert len(partition(small).kernels) == 250
    t_small = time.process_time() - start
    start = time.process_time()
    assert len(partition(big).kernels) == 2000
    t_big = time.process_time() - start
    assert t_big < 5.0  # NOTE: about 70 s for 9,000 nodes while each merge scanned the graph
    # NOTE: the floor: 250 steps take a few ms, so their time on a loaded machine is mostly noise
    assert t_big < 8 * 4 * max(t_small, 0.05)  # 8x the steps: far from the 64x of a quadratic pass


def test_two_layer_gru_over_16_steps_has_no_per_step_kernels():
    model = nn.GRU(32, 32, num_layers=2)
    g = capture(model, [torch.randn(16, 4, 32)])
    assert sum(is_recurrence(n) for n in g.nodes) == 1
    assert not [n for n in g.nodes if n.is_pointwise]


def test_canonical_text_renames_names_not_code():
    from torchweld.emit.repeats import canonical

    a = "// k3: fuses\n__global__ void k3_v4(const float* in_v12, float* out_v14) { out_v14[i] = in_v12[i] + 1.0f; }"
    b = "// k9: other comment\n__global__ void k9_v4(const float* in_v40, float* out_v41) { out_v41[i] = in_v40[i] + 1.0f; }"
    c = b.replace("1.0f", "2.0f")
    swapped = "__global__ void k9_v4(const float* in_v40, float* out_v41) { out_v41[i] = in_v41[i] + 1.0f; }"
    assert canonical(a) == canonical(b)
    assert canonical(a) != canonical(c) and canonical(a) != canonical(swapped)
    assert "0x1f" in canonical("x = 0x1f; p0 = exp2(v1);") and "exp2" in canonical("p0 = exp2(v1);")


def test_a_kernel_written_twice_keeps_both_copies(tmp_path):
    """Only a loop's steps share code (MIN_REPEATS): a block written twice by hand prints as it always did."""
    from torchweld.emit.repeats import MIN_REPEATS

    body = "\n".join(["        h = torch.tanh(self.lin(h)) * 0.5"] * (MIN_REPEATS - 1))
    source = GRU_STACK.replace("self.gru = nn.GRU(64, 128, num_layers=6, batch_first=True)",
                               "self.lin = nn.Linear(64, 64)")
    source = source.replace("        return torch.tanh(self.gru(x)[0]) * 2.0", f"        h = x\n{body}\n        return h")
    result, _ = _compile(tmp_path, "twice", source)
    assert len(result.plan.kernels) == MIN_REPEATS - 1
    assert len(re.findall(r"__global__", result.source)) == 2 * (MIN_REPEATS - 1)
