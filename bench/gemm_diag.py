"""Which change makes the Hopper 3xTF32 GEMM right (docs/gemm.md, "What the first GPU run showed"): each source
variant x six sites that failed on the H200 in session 8, relative error against fp64 on normal data, path (90: wgmma).

    python3 bench/gemm_diag.py        # on an H100/H200; about a minute, most of it nvcc
"""
import ctypes
import sys
import time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]
import torch  # noqa: E402
from gemm_harness import Case, call, errors, operands, oracle
from torchweld.codegen.gemm import GemmSpec as G
from torchweld.codegen.gemm_source import gemm_source
from kernel_bench import build_each
from gemm import NVCC_FLAGS

def T(m, k): return (m * k, 1, m)
CASES = [Case("sq", G("sq", 2048, 2048, 2048)), Case("btl", G("btl", 4096, 1024, 512, b_strides=(0, 1, 512))),
         Case("at", G("at", 1024, 768, 512, a_strides=T(1024, 512))), Case("nofold", G("nofold", 256, 256, 16384, fold=False)),
         Case("tall", G("tall", 16384, 64, 1024)), Case("sq1x", G("sq1x", 2048, 2048, 2048, precision="1xtf32"))]
DEC = "if constexpr (C::CWG > 1) twg_setmaxnreg_dec<C::CONVERT ? 56 : 40>();"
INC = "if constexpr (C::CWG > 1) twg_setmaxnreg_inc<C::CONVERT ? 224 : 232>();"
COMMIT = "      twg_wgmma_commit();\n      if constexpr (C::PIPE) {"
VARIANTS = {
    "base": [],
    "no_setmaxnreg": [(DEC, ""), (INC, "")],
    "wait_at_commit": [(COMMIT, "      twg_wgmma_commit();\n      twg_wgmma_wait<0>();\n      twg_keep(acc);\n      if constexpr (C::PIPE) {")],
    "both": [(DEC, ""), (INC, ""), (COMMIT, "      twg_wgmma_commit();\n      twg_wgmma_wait<0>();\n      twg_keep(acc);\n      if constexpr (C::PIPE) {")],
}
def main() -> None:
    srcs = {}
    for v, subs in VARIANTS.items():
        for c in CASES:
            s = gemm_source([c.spec])
            for a, b in subs:
                assert a in s, (v, a[:40])
                s = s.replace(a, b)
            srcs[f"{v}__{c.id}"] = s
    out = Path("/tmp/gdiag"); out.mkdir(exist_ok=True)
    t0 = time.time(); libs = build_each(srcs, out, NVCC_FLAGS, 16); print(f"built {len(libs)} in {time.time()-t0:.0f}s", flush=True)
    for v in VARIANTS:
        row = []
        for c in CASES:
            lib = ctypes.CDLL(str(libs[f"{v}__{c.id}"]))
            path = getattr(lib, f"tw_gemm_path_{c.spec.name}")()
            ops = operands(c, seed=3, device="cuda", fill="randn")
            assert call(lib, c, ops, vec=1) == 0
            torch.cuda.synchronize()
            ref, _ = oracle(c, ops)
            row.append(f"{c.id}[{path}] {errors(ops['out'][1], ref)[1]:.1e}")
        print(f"{v:16s} " + "  ".join(row), flush=True)


if __name__ == "__main__":
    main()
