"""GEMM ways on linear shapes (strict fp32 and bf16): eager's addmm(b, x, W.t()), mm(x, W.t()), F.linear,
and with the weight packed as W.t().contiguous(): mm and addmm. L2 flushed before each call, CUDA events,
the ways interleaved, the median of 60 calls (microseconds). Writes $OUT/gemm.json (or ./gemm.json).

    python3 bench/gemm_pack_probe.py
"""
import json
import os
import statistics

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
shapes = [(512, 1024, 4096), (4096, 512, 2048), (4096, 2048, 512), (2048, 1024, 4096), (2048, 4096, 1024),
          (4096, 1024, 1024), (128, 4096, 4096), (256, 2048, 8192), (4096, 1024, 512), (4096, 512, 128),
          (1024, 1024, 2048), (1024, 1024, 5632), (6272, 768, 768), (8192, 512, 1536)]
flush = torch.empty(2 * 50 * 2**20 // 4, dtype=torch.int32, device="cuda")
rows = []
for dt in (torch.float32, torch.bfloat16):
    for M, K, N in shapes:
        x = torch.randn(M, K, device="cuda", dtype=dt); W = torch.randn(N, K, device="cuda", dtype=dt)
        b = torch.randn(N, device="cuda", dtype=dt); Wt = W.t().contiguous()
        ways = {"addmm": lambda: torch.addmm(b, x, W.t()), "mm": lambda: torch.mm(x, W.t()),
                "mm_packed": lambda: torch.mm(x, Wt), "addmm_packed": lambda: torch.addmm(b, x, Wt),
                "linear": lambda: torch.nn.functional.linear(x, W, b)}
        t = {k: [] for k in ways}
        for f in ways.values():
            f(); f()
        for i in range(60):
            for k, f in ways.items():
                flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); f(); e.record(); e.synchronize()
                t[k].append(s.elapsed_time(e))
        med = {k: round(statistics.median(v) * 1e3, 1) for k, v in t.items()}
        rows.append({"dtype": str(dt), "MKN": (M, K, N), "us": med})
        print(str(dt)[6:], (M, K, N), med, flush=True)
json.dump(rows, open(os.environ.get("OUT", ".") + "/gemm.json", "w"))
