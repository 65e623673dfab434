"""Run generated depthwise kernels on the CPU: their two phases compiled for the host with g++,
every thread of every block run in turn (all loads of a block, then all computes: what the one
`__syncthreads()` between them guarantees on a GPU). Shared memory starts as NaN and outputs as a
sentinel, so a read of an unloaded element or an output never written shows in the result."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import torch

from torchweld.codegen.depthwise import depthwise_parts
from torchweld.codegen.common import LOWP_PRELUDE, PRELUDE, STORAGE
from torchweld.interp import run_graph
from torchweld.ir import Plan

GXX = shutil.which("g++")
SENTINEL = -7777.0

SHIM = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
static inline float __half2float(__half h) { _Float16 v; memcpy(&v, &h.x, 2); return (float)v; }
static inline __half __float2half_rn(float f) { _Float16 v = (_Float16)f; __half h; memcpy(&h.x, &v, 2); return h; }
static inline float __bfloat162float(__nv_bfloat16 h) { uint32_t u = (uint32_t)h.x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  __nv_bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) { h.x = 0x7fc0; return h; }
  u += 0x7fffu + ((u >> 16) & 1u);
  h.x = (uint16_t)(u >> 16);
  return h;
}
static std::vector<char> tw_read(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) { perror(path.c_str()); exit(2); }
  fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  std::vector<char> b(n);
  if (fread(b.data(), 1, n, f) != (size_t)n) exit(3);
  fclose(f);
  return b;
}
static void tw_write(const std::string& path, const std::vector<char>& b) {
  FILE* f = fopen(path.c_str(), "wb");
  fwrite(b.data(), 1, b.size(), f);
  fclose(f);
}
"""


def _prelude(lowp: bool) -> str:
    text = PRELUDE.replace("%(LOWP)s\n", LOWP_PRELUDE if lowp else "")
    return "\n".join(line for line in text.splitlines()
                     if not line.startswith("#include") and "tw_error_string" not in line)


def _runner(name: str, k, nodes, t, blocks: int, smem: int) -> str:
    ins = [f"const {STORAGE[nodes[a].dtype]}* in_{a}" for a in k.inputs]
    outs = [f"{STORAGE[nodes[o].dtype]}* out_{o}" for o in k.outputs]
    args = ", ".join([f"in_{a}" for a in k.inputs] + [f"out_{o}" for o in k.outputs])
    return "\n".join([
        f"static void run_{name}({', '.join(ins + outs)}) {{",
        f"  std::vector<float> sm({smem} + 4);",
        f"  for (unsigned blk = 0; blk < {blocks}u; ++blk) {{",
        "    for (auto& v : sm) v = NAN;",
        f"    for (unsigned t = 0; t < {t.threads}u; ++t) {name}_load({args}, sm.data(), blk, t);",
        f"    for (unsigned t = 0; t < {t.threads}u; ++t) {name}_compute({args}, sm.data(), blk, t);",
        "  }", "}", ""])


def _call(name: str, k, nodes) -> str:
    lines = ["  {"]
    for a in k.inputs:
        lines.append(f'    auto b_{a} = tw_read(dir + "/{name}_{a}.bin");')
    for o in k.outputs:
        lines.append(f'    auto b_{o} = tw_read(dir + "/{name}_{o}.bin");')
    casts = [f"(const {STORAGE[nodes[a].dtype]}*)b_{a}.data()" for a in k.inputs] + [
        f"({STORAGE[nodes[o].dtype]}*)b_{o}.data()" for o in k.outputs]
    lines.append(f"    run_{name}({', '.join(casts)});")
    lines += [f'    tw_write(dir + "/{name}_{o}.out", b_{o});' for o in k.outputs]
    lines.append("  }")
    return "\n".join(lines)


def _values(p: Plan, state: dict, inputs: list, upcast: bool = False) -> dict:
    """Every kernel operand and output, evaluated by the IR interpreter (`upcast`: fp16/bf16
    tensors computed in fp32, results rounded back: what the kernel does)."""
    names = tuple(dict.fromkeys(n for k in p.kernels for n in k.inputs + k.outputs))
    g = replace(p.graph, outputs=names, single_output=False)
    up = (lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16) else t) \
        if upcast else (lambda t: t)
    values = run_graph(g, {k: up(v) for k, v in state.items()}, [up(t) for t in inputs])
    dtypes = p.graph.by_name()
    return {n: v.to(getattr(torch, dtypes[n].dtype)) for n, v in zip(names, values)}


def run_on_host(cases: list, workdir: Path) -> list[dict]:
    """cases: (plan, state, inputs). Runs each plan's depthwise kernel on the host; per case, the
    kernel's outputs (`got`) and the interpreter's (`want`), by output name."""
    parts, calls, lowp, expected = [], [], False, []
    for i, (p, state, inputs) in enumerate(cases):
        (k,) = [k for k in p.kernels if k.kind == "depthwise"]
        k = replace(k, name=f"s{i}")
        nodes = p.graph.by_name()
        device, _, g, t = depthwise_parts(k, p.graph)
        lowp = lowp or any(nodes[n].dtype in ("float16", "bfloat16") for n in k.inputs + k.outputs)
        blocks = -(-(g.N * g.C) // t.PB) * t.tiles_h * t.tiles_w
        smem = t.PB * (t.tile + g.M * (g.KH * g.KW + 1))
        parts += [device, _runner(k.name, k, nodes, t, blocks, smem)]
        calls.append(_call(k.name, k, nodes))
        values, exact = _values(p, state, inputs), _values(p, state, inputs, upcast=True)
        flat = nodes[k.anchor].args[:2]  # NOTE: the wrapper hands the kernel these contiguous
        for a in k.inputs:
            _dump(values[a], workdir / f"{k.name}_{a}.bin", None if a in flat else nodes[a].stride)
        for o in k.outputs:
            _dump(torch.full(nodes[o].shape, SENTINEL, dtype=values[o].dtype), workdir / f"{k.name}_{o}.bin")
        expected.append((k, {o: exact[o] for o in k.outputs}))
    main = "int main(int argc, char** argv) {\n  const std::string dir = argv[1];\n" + "\n".join(calls) + "\n  return 0;\n}\n"
    src = SHIM + _prelude(lowp) + "\n" + "\n".join(parts) + main
    cpp = workdir / "dw_host.cpp"
    cpp.write_text(src)
    exe = workdir / "dw_host"
    flags = ["-std=c++17", "-O1", "-w", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    proc = subprocess.run([GXX, *flags, "-o", str(exe), str(cpp)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run([str(exe), str(workdir)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = []
    for k, want in expected:
        got = {o: _load(workdir / f"{k.name}_{o}.out", w) for o, w in want.items()}
        results.append({"got": got, "want": want})
    return results


def _dump(t: torch.Tensor, path: Path, stride: tuple | None = None) -> None:
    """The tensor's memory as the kernel reads it: contiguous, or laid out with the captured
    `stride` as the emitted wrapper does (`_tw_layout`)."""
    t = t.detach()
    if stride and len(stride) == t.dim():
        span = 1 + sum((n - 1) * st for n, st in zip(t.shape, stride))
        t = torch.empty_strided(t.shape, stride, dtype=t.dtype).copy_(t).as_strided((span,), (1,))
    path.write_bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def _load(path: Path, like: torch.Tensor) -> torch.Tensor:
    raw = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)
    return raw.view(like.dtype).reshape(like.shape)
