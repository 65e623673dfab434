"""Our GEMM (torchweld/codegen/gemm*.py) against cuBLAS, in one run: builds every site, checks it
against fp64 on fresh inputs (output poisoned with NaN), then times ours, cuBLAS strict fp32, cuBLAS
TF32, and the cuBLAS 3xTF32 baseline (the split run as one TF32 product over K' = 3K:
[A_hi, A_hi, A_lo] x [B_hi; B_lo; B_hi]) or cuBLAS fp16/bf16; CUDA events, L2 flushed before each
call, median. Prints a table (TFLOP/s, the roofline floor, errors against fp64) and writes
gemm_bench.json and gemm_bench.md under OUT_DIR; exits 1 when a check fails.

    python3 bench/gemm.py OUT_DIR                 # on an H100/H200: about 5 minutes, most of it nvcc
    python3 bench/gemm.py OUT_DIR --dry-run       # anywhere with nvcc: generate and compile, time nothing
    python3 bench/gemm.py OUT_DIR --only square   # shape classes: see --list
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402

from kernel_bench import build_each, median_ms  # noqa: E402

from gemm_harness import NVCC_SM80, NVCC_SM90, TOLERANCE, Case, bind, call, col, errors, operands, oracle  # noqa: E402
from torchweld.codegen.gemm import GemmSpec as G  # noqa: E402
from torchweld.codegen.gemm import plan  # noqa: E402
from torchweld.codegen.gemm_source import gemm_source  # noqa: E402

# Datasheet ceilings of an H100/H200 SXM (leads, not measured here): dense matrix rates and HBM.
PEAK = {"fp32": 67e12, "3xtf32": 495e12 / 3, "1xtf32": 495e12, "native": 989e12}
HBM = 4.8e12
NVCC_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", *NVCC_SM90, *NVCC_SM80]


def T(m: int, k: int) -> tuple:
    return (m * k, 1, m)


def _shapes() -> list[tuple[str, Case]]:
    """(class, case): every shape class of issue 13."""
    out = []
    for n in (1024, 2048, 4096, 8192):
        out.append(("square", Case(f"sq{n}_3x", G(f"sq{n}_3x", n, n, n))))
    for n in (4096, 8192):
        out.append(("square", Case(f"sq{n}_1x", G(f"sq{n}_1x", n, n, n, precision="1xtf32"))))
        out.append(("square", Case(f"sq{n}_f16", G(f"sq{n}_f16", n, n, n, dtype="float16"))))
        out.append(("square", Case(f"sq{n}_bf16", G(f"sq{n}_bf16", n, n, n, dtype="bfloat16"))))
    out += [
        ("linear", Case("lin_3x", G("lin_3x", 8192, 4096, 4096, b_strides=(0, 1, 4096)))),
        ("linear", Case("lin_1x", G("lin_1x", 8192, 4096, 4096, precision="1xtf32", b_strides=(0, 1, 4096)))),
        ("transposed", Case("at_3x", G("at_3x", 4096, 4096, 4096, a_strides=T(4096, 4096)))),
        ("transposed", Case("at_bt_f16", G("at_bt_f16", 4096, 4096, 4096, dtype="float16", a_strides=T(4096, 4096),
                                           b_strides=(0, 1, 4096)))),
        ("tall-skinny", Case("tall_3x", G("tall_3x", 65536, 128, 2048))),
        ("tall-skinny", Case("wide_3x", G("wide_3x", 128, 65536, 2048))),
        ("small-K", Case("smallk_3x", G("smallk_3x", 8192, 8192, 64))),
        ("large-K", Case("largek_3x", G("largek_3x", 1024, 1024, 32768))),
        ("irregular", Case("irr_3x", G("irr_3x", 3000, 3000, 3000))),
        ("irregular", Case("irr_odd_3x", G("irr_odd_3x", 2047, 2049, 1023))),  # no TMA: mma.sync on Hopper
        ("batched", Case("bmm_3x", G("bmm_3x", 1024, 1024, 1024, batch=32))),
        ("batched", Case("bmm_qk_bf16", G("bmm_qk_bf16", 2048, 2048, 128, batch=64, dtype="bfloat16",
                                          b_strides=(2048 * 128, 1, 128)))),
        ("matrix-vector", Case("mv_3x", G("mv_3x", 16384, 1, 16384))),
        ("epilogue", Case("epi_3x", G("epi_3x", 4096, 4096, 4096, epilogue="fmaxf(acc + bias[col], 0.f)",
                                      inputs=(col("bias"),)), epi=lambda a, r, c, b, x: torch.clamp_min(a + x["bias"], 0))),
        ("row-reduction", Case("rowsum_3x", G("rowsum_3x", 4096, 4096, 4096, reduce="sum", store=False))),
        # Does the tensor core round its fp32 sums toward zero? Without the per-k-tile fold the
        # 3xTF32 error on positive data then grows with K (docs/gemm.md, "Numerics").
        ("probe", Case("probe_fold", G("probe_fold", 1024, 1024, 16384))),
        ("probe", Case("probe_nofold", G("probe_nofold", 1024, 1024, 16384, fold=False))),
    ]
    return out


def build(cases: list[Case], out: Path, jobs: int) -> dict[str, Path]:
    """Each site in a file of its own, nvcc'd in parallel into a shared library; {id: library}."""
    (out / "gemm_bench.cu").write_text(gemm_source([c.spec for c in cases]))  # the whole set, for reading
    return build_each({c.id: gemm_source([c.spec]) for c in cases}, out, NVCC_FLAGS, jobs)


def sass_counts(so: Path) -> dict:
    """HGMMA / HMMA instructions in a library's SASS, where a cuobjdump is at hand."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return {}
    sass = subprocess.run([tool, "--dump-sass", str(so)], capture_output=True, text=True).stdout
    return {op: sass.count(op) for op in ("HGMMA", "HMMA", "UTMALDG", "LDL", "STL")}


def _tf32(x: torch.Tensor) -> torch.Tensor:
    return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def baselines(case: Case, ops: dict) -> dict:
    """name -> function returning the cuBLAS result (same operands, read in place through their views)."""
    s = plan(case.spec).spec
    a, b = ops["a"][1], ops["b"][1]
    mm = (lambda x, y: torch.matmul(x, y)) if s.batch > 1 else (lambda x, y: torch.matmul(x[0], y[0])[None])

    def with_tf32(flag, f):
        def run():
            old = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = flag
            try:
                return f()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = old
        return run

    if s.dtype != "float32":
        return {"cuBLAS": lambda: mm(a, b)}

    def split3():
        ah, bh = _tf32(a), _tf32(b)
        return (torch.cat([ah, ah, _tf32(a - ah)], dim=-1), torch.cat([bh, _tf32(b - bh), bh], dim=-2))

    a3, b3 = split3()
    return {"cuBLAS fp32": with_tf32(False, lambda: mm(a, b)), "cuBLAS TF32": with_tf32(True, lambda: mm(a, b)),
            "cuBLAS 3xTF32": with_tf32(True, lambda: mm(*split3())),
            "cuBLAS 3xTF32 GEMM only": with_tf32(True, lambda: mm(a3, b3))}


def eager(case: Case, ops: dict) -> torch.Tensor:
    """cuBLAS strict fp32, then the site's epilogue and row reduction in eager PyTorch."""
    s = plan(case.spec).spec
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        acc = torch.matmul(ops["a"][1], ops["b"][1]) * s.alpha
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    if s.c_strides and s.beta:
        acc = acc + s.beta * ops["c"][1]
    idx = lambda d: torch.arange(acc.shape[d], device=acc.device).view([-1 if i == d else 1 for i in range(3)])  # noqa: E731
    out = case.epi(acc, idx(1), idx(2), idx(0), {x.name: ops[x.name][1] for x in s.inputs})
    if s.reduce:
        out = case.post({"sum": lambda v: v.sum(-1), "max": lambda v: v.amax(-1), "min": lambda v: v.amin(-1)}[s.reduce](out))
    return out


def run_case(cls: str, case: Case, lib, flush: torch.Tensor, reps: int) -> dict:
    s = plan(case.spec)
    spec = s.spec
    flops = 2.0 * spec.batch * spec.m * spec.n * spec.k
    es = {"float32": 4, "float16": 2, "bfloat16": 2}[spec.dtype]
    nbytes = es * spec.batch * (spec.m * spec.k + spec.k * spec.n + (spec.m * spec.n if spec.store else spec.m))
    peak = PEAK[spec.precision]
    row = {"class": cls, "id": case.id, "shape": f"{spec.batch}x{spec.m}x{spec.n}x{spec.k}", "dtype": spec.dtype,
           "precision": spec.precision, "tiles": s.describe(), "floor_ms": 1e3 * max(flops / peak, nbytes / HBM),
           "path": getattr(lib, f"tw_gemm_path_{spec.name}")(), "checks": {}}
    ok = True
    for seed in (1, 2):  # fresh inputs, output poisoned with NaN
        ops = operands(case, seed=seed, device="cuda", fill="rand")
        err = call(lib, case, ops, vec=1, stream=torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        if err:
            raise SystemExit(f"{case.id}: CUDA error {err}")
        ref, red = oracle(case, ops)
        got, want = (ops["out"][1], ref) if spec.store else (ops["red"][1], red)
        max_err, rel, unwritten = errors(got, want)
        ok &= unwritten == 0 and rel < TOLERANCE[spec.precision]
        row["ours_err"] = {"max": max_err, "rel": rel, "unwritten": unwritten}
    row["checks"]["fp64"] = ok
    if torch.cuda.get_device_capability()[0] == 9 and s.sm90:
        row["checks"]["wgmma path"] = row["path"] == 90
    stream = torch.cuda.current_stream().cuda_stream
    times = {"ours": median_ms(bind(lib, case, ops, 1, stream), flush, reps)}
    errs = {"ours": row["ours_err"]["rel"]}
    plain = spec.store and not spec.inputs and not spec.c_strides
    for name, fn in (baselines(case, ops) if plain else {"cuBLAS fp32 + eager": lambda: eager(case, ops)}).items():
        times[name] = median_ms(fn, flush, reps)
        errs[name] = errors(fn(), want)[1]
    row["ms"] = times
    row["tflops"] = {k: flops / v / 1e9 for k, v in times.items()}
    row["rel_err"] = errs
    if spec.precision == "3xtf32" and "cuBLAS fp32" in errs:  # the accuracy bound
        row["checks"]["3xTF32 err <= 2x cuBLAS fp32"] = errs["ours"] <= 2 * errs["cuBLAS fp32"]
    return row


def table(rows: list[dict]) -> str:
    cols = ["ours", "cuBLAS fp32", "cuBLAS TF32", "cuBLAS 3xTF32", "cuBLAS", "cuBLAS fp32 + eager"]
    head = "| class | site | shape (b x m x n x k) | prec | path | floor ms | " + " | ".join(
        f"{c} TFLOP/s" for c in cols) + " | ours rel err | vs cuBLAS fp32 err | checks |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        tf = [f"{r['tflops'][c]:.1f}" if c in r.get("tflops", {}) else "" for c in cols]
        ref = r.get("rel_err", {}).get("cuBLAS fp32")
        checks = ", ".join(f"{k}: {'ok' if v else 'FAIL'}" for k, v in r["checks"].items())
        lines.append(f"| {r['class']} | {r['id']} | {r['shape']} | {r['precision']} | {r['path']} | "
                     f"{r['floor_ms']:.3f} | " + " | ".join(tf) + f" | {r['rel_err']['ours']:.2e} | "
                     f"{'' if ref is None else f'{ref:.2e}'} | {checks} |")
    return "\n".join(lines)


def targets(rows: list[dict]) -> list[str]:
    """Issue 13's performance targets, each with the measured ratio."""
    out = []
    for r in rows:
        t = r.get("tflops", {})
        if r["precision"] == "3xtf32" and r["class"] == "square" and r["id"] in ("sq4096_3x", "sq8192_3x"):
            out.append(f"{r['id']}: 3xTF32 / cuBLAS fp32 = {t['ours'] / t['cuBLAS fp32']:.2f} (target >= 1.8)")
        if r["precision"] == "1xtf32" and "cuBLAS TF32" in t:
            out.append(f"{r['id']}: 1xTF32 / cuBLAS TF32 = {t['ours'] / t['cuBLAS TF32']:.2f} (target >= 0.9)")
        if r["precision"] == "native" and "cuBLAS" in t:
            out.append(f"{r['id']}: {r['dtype']} / cuBLAS = {t['ours'] / t['cuBLAS']:.2f} (target >= 0.85)")
    probe = {r["id"]: r["rel_err"]["ours"] for r in rows if r["class"] == "probe"}
    if len(probe) == 2:
        out.append(f"probe: 3xTF32 error without / with the k-tile fold = {probe['probe_nofold'] / probe['probe_fold']:.1f}"
                   " (near 1: the tensor core's sums round to nearest; well above 1: toward zero)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, nargs="?", default=Path("gemm_bench_out"))
    ap.add_argument("--dry-run", action="store_true", help="generate and compile every site; time nothing (no GPU needed)")
    ap.add_argument("--only", nargs="*", default=None, help="shape classes or site ids to run")
    ap.add_argument("--list", action="store_true", help="print the shape classes and sites, then exit")
    ap.add_argument("--reps", type=int, default=15, help="timed calls per measurement (median)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel nvcc processes")
    args = ap.parse_args()
    shapes = _shapes()
    if args.only:
        shapes = [(c, k) for c, k in shapes if c in args.only or k.id in args.only]
    if args.list:
        for cls, case in shapes:
            print(f"{cls:14s} {case.id:14s} {plan(case.spec).describe()}")
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    libs = build([k for _, k in shapes], args.out_dir, args.jobs)
    print(f"compiled {len(libs)} sites in {time.time() - t0:.0f} s (nvcc {' '.join(NVCC_FLAGS)})")
    if args.dry_run:
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("no GPU: use --dry-run")
    sass = sass_counts(next(iter(libs.values())))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    rows = []
    for cls, case in shapes:
        lib = ctypes.CDLL(str(libs[case.id]))
        rows.append(run_case(cls, case, lib, flush, args.reps))
        r = rows[-1]
        print(f"{case.id:14s} path {r['path']} ours {r['tflops']['ours']:7.1f} TFLOP/s  rel err {r['rel_err']['ours']:.2e}"
              + "".join(f"  {k} {v:.1f}" for k, v in r["tflops"].items() if k != "ours"), flush=True)
    device = torch.cuda.get_device_name(0)
    report = {"device": device, "torch": torch.__version__, "nvcc_flags": NVCC_FLAGS, "sass": sass, "rows": rows,
              "targets": targets(rows), "seconds": time.time() - t0}
    (args.out_dir / "gemm_bench.json").write_text(json.dumps(report, indent=1))
    md = f"# GEMM bench on {device}\n\n{table(rows)}\n\nTargets:\n" + "".join(f"- {t}\n" for t in report["targets"])
    md += f"\nSASS of {next(iter(libs))}: {sass}\n"
    (args.out_dir / "gemm_bench.md").write_text(md)
    print(md)
    failed = [r["id"] for r in rows if not all(r["checks"].values())]
    if failed:
        print("CHECKS FAILED:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
