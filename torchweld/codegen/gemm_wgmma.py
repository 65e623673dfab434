"""The wgmma instructions a Hopper GEMM site uses, as inline-PTX wrappers (their operand lists grow
with N, so they are written out here rather than in gemm_sm90.cuh). Each wrapper is an explicit
specialisation of a template that tests/gemm_emu.h defines generically."""
from __future__ import annotations

# (wrapper, PTX type, k per instruction, A from registers)
_KINDS = {
    "rs_tf32": ("tf32", 8, True),
    "ss_tf32": ("tf32", 8, False),
    "ss_f16": ("f16", 16, False),
    "ss_bf16": ("bf16", 16, False),
}


def _declarations() -> str:
    return """template <int N> TWG_DEV void twg_wgmma_rs_tf32(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d);
template <int N> TWG_DEV void twg_wgmma_ss_tf32(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d);
template <int N, bool TA, bool TB> TWG_DEV void twg_wgmma_ss_f16(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d);
template <int N, bool TA, bool TB> TWG_DEV void twg_wgmma_ss_bf16(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d);
"""


def wrapper(kind: str, n: int, ta: bool = False, tb: bool = False) -> str:
    """One `wgmma.mma_async` m64nNk* wrapper: fp32 accumulators d[N/2], scale_d 0 overwrites them."""
    ty, k, regs = _KINDS[kind]
    nd = n // 2
    dregs = ", ".join(f"%{i}" for i in range(nd))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    if regs:
        a_op = "{" + ", ".join(f"%{nd + i}" for i in range(4)) + "}"
        b_op, pred = f"%{nd + 4}", nd + 5
        ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)'
        params = "const uint32_t (&a)[4], uint64_t db, int scale_d"
    else:
        a_op, b_op, pred = f"%{nd}", f"%{nd + 1}", nd + 2
        ins = '"l"(da), "l"(db), "r"(scale_d)'
        params = "uint64_t da, uint64_t db, int scale_d"
    # NOTE: imm-scale-a/b are 1; the transpose immediates exist for fp16/bf16 only (TF32 is K-major)
    tail = "1, 1" if ty == "tf32" else f"1, 1, {int(ta)}, {int(tb)}"
    targs = f"{n}" if ty == "tf32" else f"{n}, {str(ta).lower()}, {str(tb).lower()}"
    asm = (f'"{{ .reg .pred p; setp.ne.b32 p, %{pred}, 0; "\n'
           f'      "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ty}.{ty} {{{dregs}}}, {a_op}, {b_op}, p, {tail}; }}"')
    return (f"template <> TWG_DEV void twg_wgmma_{kind}<{targs}>(float (&d)[{nd}], {params}) {{\n"
            f"  asm volatile({asm}\n      : {outs}\n      : {ins});\n}}\n")


def wrappers(uses: set[tuple]) -> str:
    """The declarations and the wrappers in `uses`, each a (kind, n, ta, tb) tuple, in a stable order."""
    return _declarations() + "".join(wrapper(*u) for u in sorted(uses))
