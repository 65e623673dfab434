"""Our convolution (torchweld/codegen/conv_*.py) against cuDNN, in one run: builds every layer site,
checks it against fp64 on fresh inputs (output poisoned with NaN), then times ours, cuDNN with NCHW
data and cuDNN with channels-last data (each followed by the site's epilogue in eager PyTorch), at
strict fp32 (ours 3xTF32), TF32 (ours 1xTF32, cuDNN allowed TF32) and fp16; CUDA events, L2 flushed
before each call, median. Then the seed problems 000, 001, 002, 004 compiled with --conv-ours, run
with our kernel forced at every site, against eager and torch.compile (errors against fp64).
Prints a table and writes conv_bench.json and conv_bench.md under OUT_DIR; exits 1 when a check fails.

    python3 bench/conv.py OUT_DIR                 # on an H100/H200: a few minutes, most of it nvcc
    python3 bench/conv.py OUT_DIR --dry-run       # anywhere with nvcc: generate and compile, time nothing
    python3 bench/conv.py OUT_DIR --only r50_3x3  # layer ids or classes, "seeds": see --list
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402

from kernel_bench import build_each, median_ms  # noqa: E402

from conv_harness import TOLERANCE, Case, bind, errors, operands, oracle, pooled, reduced, result, site  # noqa: E402
from torchweld.codegen.conv_source import conv_source  # noqa: E402
from torchweld.codegen.conv_spec import plan  # noqa: E402

NVCC_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo",
              "-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_80,code=sm_80"]
# Datasheet ceilings of an H100/H200 SXM (leads, not measured here): dense matrix rates and HBM.
PEAK = {"3xtf32": 495e12 / 3, "1xtf32": 495e12, "native": 989e12}
HBM = 4.8e12
SEEDS = ["seed000_convt3d_bias_residual", "seed001_conv2d_relu_bias", "seed002_convt3d", "seed004_convt2d_bias_clamp_scale"]


def _layers() -> list[tuple[str, Case]]:
    """(class, case): realistic layers, each at the three precisions."""
    base = [
        ("resnet", site("r50_3x3", 2, False, n=32, cin=64, cout=64, size=56, padding=1, bn=True, relu=True)),
        ("resnet", site("r50_3x3_c256", 2, False, n=32, cin=256, cout=256, size=14, padding=1, bn=True, residual=True,
                        relu=True)),
        ("resnet", site("r50_1x1", 2, False, n=32, cin=256, cout=64, size=56, kernel=1, bn=True, relu=True)),
        ("resnet", site("r50_down", 2, False, n=32, cin=128, cout=128, size=56, padding=1, stride=2, bn=True)),
        ("mobilenet", site("mb_expand", 2, False, n=64, cin=32, cout=192, size=56, kernel=1, bn=True, relu=True)),
        ("mobilenet", site("mb_dw", 2, False, n=64, cin=192, cout=192, size=56, padding=1, groups=192, bn=True)),
        ("grouped", site("resnext_g32", 2, False, n=32, cin=256, cout=256, size=28, padding=1, groups=32, bn=True)),
        ("unet", site("unet_up", 2, True, n=16, cin=128, cout=64, size=64, kernel=2, stride=2, bias=True)),
        ("unet", site("unet_up_k4", 2, True, n=16, cin=128, cout=64, size=64, kernel=4, stride=2, padding=1, bias=True)),
        ("1d", site("tcn", 1, False, n=32, cin=128, cout=128, size=2048, kernel=3, dilation=4, padding=4, residual=True)),
        ("pool", site("vgg_pool", 2, False, n=16, cin=64, cout=128, size=112, padding=1, bias=True, relu=True, pool="max")),
        ("3d", site("c3d", 3, False, n=8, cin=32, cout=64, size=(16, 56, 56), padding=1, bias=True, relu=True)),
        ("3d", site("t3d", 3, True, n=8, cin=64, cout=32, size=(8, 28, 28), kernel=3, stride=2, padding=1,
                    output_padding=1, bias=True)),
        # reductions in the epilogue (cuDNN's rows run the reduction in eager PyTorch after the convolution)
        ("reduce", site("gap_r34", 2, False, n=64, cin=512, cout=512, size=7, padding=1, bn=True, relu=True, reduce="mean")),
        ("reduce", site("gap_c256", 2, False, n=64, cin=32, cout=256, size=32, padding=1, bias=True, relu=True,
                        reduce="mean")),
        ("reduce", site("se_pool", 2, False, n=32, cin=128, cout=128, size=28, padding=1, bn=True, reduce="mean",
                        store=True, out_layout="nc")),
        ("reduce", site("seg_softmax", 2, False, n=32, cin=32, cout=64, size=64, padding=1, bias=True, reduce="softmax",
                        out_layout="nc")),
        ("reduce", site("chan_max", 2, False, n=32, cin=16, cout=48, size=96, padding=1, bias=True, reduce="chan_max",
                        out_layout="nc")),
    ]
    out = []
    for cls, c in base:
        for tag, dtype, prec in (("3x", "float32", ""), ("1x", "float32", "1xtf32"), ("h16", "float16", "")):
            name = f"{c.id}_{tag}"
            out.append((cls, Case(name, replace(c.spec, name=name, dtype=dtype, precision=prec,
                                                inputs=tuple(replace(x, dtype=dtype) if x.kind == "full" or x.name == "bias"
                                                             else x for x in c.spec.inputs)), c.epi, c.post)))
    return out


def build(cases: list[Case], out: Path, jobs: int) -> dict[str, Path]:
    """Each site in a file of its own, nvcc'd in parallel into a shared library; {id: library}."""
    (out / "conv_bench.cu").write_text(conv_source([c.spec for c in cases]))  # the whole set, for reading
    return build_each({c.id: conv_source([c.spec]) for c in cases}, out, NVCC_FLAGS, jobs)


def cudnn(case: Case, ops: dict, fmt, tf32: bool):
    """A function running torch.convolution on the site's operands with x and w in memory format `fmt`
    (converted beforehand, as data would arrive), then its epilogue in eager PyTorch."""
    s = plan(case.spec).spec
    x, w = ops["x"][1].contiguous(memory_format=fmt), ops["w"][1].contiguous(memory_format=fmt)
    views = {i.name: ops[i.name][1].view(1, -1, *([1] * s.dims)) if i.kind == "chan" else ops[i.name][1] for i in s.inputs}

    def run():
        old = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = tf32
        try:
            acc = torch.convolution(x, w, None, s.stride, s.padding, s.dilation, s.transposed, s.output_padding, s.groups)
        finally:
            torch.backends.cudnn.allow_tf32 = old
        return reduced(case, pooled(case, case.epi(acc, views), views), views)
    return run


def run_case(cls: str, case: Case, lib, flush: torch.Tensor, reps: int) -> dict:
    p = plan(case.spec)
    s = p.spec
    flops = 2.0 * s.groups * p.m * p.n * p.k
    es = 4 if s.dtype == "float32" else 2
    pixels = s.reduce in ("sum", "mean", "max", "min")  # NOTE: an (n, c) result; the full output only where stored
    stored = (s.n * s.cout if pixels else 0) + (0 if pixels and not s.reduce_store else s.n * s.store_channels * math.prod(p.psz))
    nbytes = es * (s.n * s.cin * p.isz[0] * p.isz[1] * p.isz[2] + s.cout * p.k + stored)
    row = {"class": cls, "id": case.id, "dtype": s.dtype, "precision": s.precision, "how": p.describe(),
           "floor_ms": 1e3 * max(flops / PEAK[s.precision], nbytes / HBM), "checks": {}}
    ok = True
    for seed in (1, 2):  # fresh inputs, output poisoned with NaN
        ops = operands(case, seed=seed, device="cuda")
        err = bind(lib, case, ops, 1, torch.cuda.current_stream().cuda_stream)()
        torch.cuda.synchronize()
        if err:
            raise SystemExit(f"{case.id}: CUDA error {err}")
        want = oracle(case, ops)
        max_err, rel, unwritten = errors(ops[result(case)][1], want)
        ok &= unwritten == 0 and rel < TOLERANCE[s.precision]
    row["checks"]["fp64"] = ok
    tf32 = s.precision == "1xtf32"
    fmt_cl = {1: torch.contiguous_format, 2: torch.channels_last, 3: torch.channels_last_3d}[s.dims]
    ways = {"ours": bind(lib, case, ops, 1, torch.cuda.current_stream().cuda_stream),
            "cuDNN NCHW": cudnn(case, ops, torch.contiguous_format, tf32), "cuDNN NHWC": cudnn(case, ops, fmt_cl, tf32)}
    row["ms"] = {k: median_ms(fn, flush, reps) for k, fn in ways.items()}
    row["rel_err"] = {"ours": errors(ops[result(case)][1], want)[1]}
    row["rel_err"].update({k: errors(fn(), want)[1] for k, fn in ways.items() if k != "ours"})
    row["tflops"] = {k: flops / v / 1e9 for k, v in row["ms"].items()}
    if s.precision == "3xtf32":
        row["checks"]["3xTF32 err <= 2x cuDNN fp32"] = row["rel_err"]["ours"] <= 2 * min(
            row["rel_err"]["cuDNN NCHW"], row["rel_err"]["cuDNN NHWC"])
    return row


def seeds(out: Path, dry: bool, reps: int, flush) -> list[dict]:
    """Each seed problem compiled with --conv-ours; on a GPU: ours forced at every site, eager and
    torch.compile timed, errors against the model in fp64."""
    from torchweld.options import Options
    from torchweld.pipeline import compile_problem
    from torchweld.problem import load_module, load_problem
    rows = []
    for name in SEEDS:
        problem = load_problem(ROOT / "problems" / "seeds" / f"{name}.py")
        result = compile_problem(problem, Options(conv_ours=True))
        path = out / f"{name}_new.py"
        path.write_text(result.source)
        row = {"id": name, "sites": [k.name for k in result.plan.kernels if k.kind == "conv"], "checks": {}}
        row["checks"]["every convolution ours"] = bool(row["sites"]) and all(
            not isinstance(s, str) for s in result.plan.conv_ours.values())
        if not dry:
            module = load_module(path, result.source, prefix="tw_conv_bench")
            model = problem.build_model(0).cuda()
            new = module.ModelNew(*problem.init_inputs()).cuda()
            new.load_state_dict(model.state_dict())
            torch.manual_seed(0)
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.inputs()]
            new.__dict__["_tw_convk_picks"] = {(k, 0): ("ours", "forced") for k in row["sites"]}
            with torch.no_grad():
                ref = problem.build_model(0).double().cuda()(*[x.double() for x in inputs])
                compiled = torch.compile(model)
                times = {"ours": median_ms(lambda: new(*inputs), flush, reps),
                         "eager": median_ms(lambda: model(*inputs), flush, reps),
                         "torch.compile": median_ms(lambda: compiled(*inputs), flush, reps)}
                errs = {"ours": errors(new(*inputs), ref)[1], "eager": errors(model(*inputs), ref)[1],
                        "torch.compile": errors(compiled(*inputs), ref)[1]}
            row.update(ms=times, rel_err=errs)
            row["checks"]["ours within 1e-4 of fp64"] = errs["ours"] < 1e-4
            del ref
            torch.cuda.empty_cache()
        rows.append(row)
    return rows


def table(rows: list[dict], seed_rows: list[dict]) -> str:
    cols = ["ours", "cuDNN NCHW", "cuDNN NHWC"]
    lines = ["| class | site | prec | floor ms | " + " | ".join(f"{c} ms" for c in cols) + " | best cuDNN / ours | "
             + " | ".join(f"{c} rel err" for c in cols) + " | checks |"]
    lines.append("|" + "---|" * (lines[0].count("|") - 1))
    for r in rows:
        ms, er = r["ms"], r["rel_err"]
        ratio = min(ms["cuDNN NCHW"], ms["cuDNN NHWC"]) / ms["ours"]
        checks = ", ".join(f"{k}: {'ok' if v else 'FAIL'}" for k, v in r["checks"].items())
        lines.append(f"| {r['class']} | {r['id']} | {r['precision']} | {r['floor_ms']:.3f} | "
                     + " | ".join(f"{ms[c]:.3f}" for c in cols) + f" | {ratio:.2f} | "
                     + " | ".join(f"{er[c]:.1e}" for c in cols) + f" | {checks} |")
    lines += ["", "| seed | sites | ours ms | eager ms | torch.compile ms | ours rel err | compile rel err | checks |",
              "|---|---|---|---|---|---|---|---|"]
    for r in seed_rows:
        ms, er = r.get("ms", {}), r.get("rel_err", {})
        checks = ", ".join(f"{k}: {'ok' if v else 'FAIL'}" for k, v in r["checks"].items())
        lines.append(f"| {r['id']} | {' '.join(r['sites'])} | {ms.get('ours', 0):.3f} | {ms.get('eager', 0):.3f} | "
                     f"{ms.get('torch.compile', 0):.3f} | {er.get('ours', 0):.1e} | {er.get('torch.compile', 0):.1e} | {checks} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, nargs="?", default=Path("conv_bench_out"))
    ap.add_argument("--dry-run", action="store_true", help="generate and compile every site; time nothing (no GPU needed)")
    ap.add_argument("--only", nargs="*", default=None, help="classes, layer ids, or 'seeds'")
    ap.add_argument("--list", action="store_true", help="print the layers and their plans, then exit")
    ap.add_argument("--reps", type=int, default=15, help="timed calls per measurement (median)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel nvcc processes")
    args = ap.parse_args()
    layers = _layers()
    if args.only:
        layers = [(c, k) for c, k in layers if c in args.only or k.id in args.only or k.id.rsplit("_", 1)[0] in args.only]
    if args.list:
        for cls, case in layers:
            print(f"{cls:10s} {case.id:20s} {plan(case.spec).describe()}")
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    libs = build([k for _, k in layers], args.out_dir, args.jobs) if layers else {}
    print(f"compiled {len(libs)} sites in {time.time() - t0:.0f} s (nvcc {' '.join(NVCC_FLAGS)})")
    want_seeds = not args.only or "seeds" in args.only
    if args.dry_run:
        for r in seeds(args.out_dir, True, 0, None) if want_seeds else []:
            print(f"{r['id']}: sites {r['sites']} {r['checks']}")
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("no GPU: use --dry-run")
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, dtype=torch.int32, device="cuda")
    rows = []
    for cls, case in layers:
        rows.append(run_case(cls, case, ctypes.CDLL(str(libs[case.id])), flush, args.reps))
        r = rows[-1]
        print(f"{case.id:20s} " + "  ".join(f"{k} {v:.3f} ms" for k, v in r["ms"].items())
              + f"  ours rel err {r['rel_err']['ours']:.1e}", flush=True)
    seed_rows = seeds(args.out_dir, False, args.reps, flush) if want_seeds else []
    device = torch.cuda.get_device_name(0)
    report = {"device": device, "torch": torch.__version__, "nvcc_flags": NVCC_FLAGS, "rows": rows, "seeds": seed_rows,
              "seconds": time.time() - t0}
    (args.out_dir / "conv_bench.json").write_text(json.dumps(report, indent=1))
    md = f"# Convolution bench on {device}\n\n{table(rows, seed_rows)}\n"
    (args.out_dir / "conv_bench.md").write_text(md)
    print(md)
    failed = [r["id"] for r in rows + seed_rows if not all(r["checks"].values())]
    if failed:
        print("CHECKS FAILED:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
