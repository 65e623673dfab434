"""CUDA source for GEMM sites (gemm.py plans them): one prelude per file (the main loops in cuh/),
then per site a struct of its constants and epilogue, and its extern "C" launcher

    int tw_launch_<name>(const void* a, const void* b, [c], [epilogue inputs...], [out], [red], int vec, void* stream)
    int tw_gemm_path_<name>(void)   // 90: wgmma, 80: mma.sync, 0: this device cannot run the site

`vec` is 1 when every pointer is 16-byte aligned. The return value is a cudaError_t."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .gemm import DTYPES, REDUCE_OPS, GemmPlan, GemmSpec, plan
from .gemm_wgmma import wrappers

CUH = Path(__file__).parent / "cuh"
_TMA_TYPE = {"float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
             "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"}


@dataclass(frozen=True)
class GemmSite:
    """A site's generated code: `source` (needs gemm_prelude), its launcher's pointer arguments in order."""
    plan: GemmPlan
    source: str
    args: tuple[str, ...]


def _cuh(name: str) -> str:
    return (CUH / name).read_text()


def _wgmma_uses(p: GemmPlan) -> set[tuple]:
    if not p.sm90:
        return set()
    bn, es = p.sm90[1], DTYPES[p.spec.dtype][1]
    if es == 4:
        regs = p.prec == 3 or not p.a_kmaj
        return {("rs_tf32" if regs else "ss_tf32", bn, False, False)}
    kind = "ss_f16" if p.spec.dtype == "float16" else "ss_bf16"
    return {(kind, bn, not p.a_kmaj, not p.b_kmaj)}


def gemm_prelude(plans: list[GemmPlan], emu: bool = False, extra: frozenset = frozenset()) -> str:
    """The main loops and primitives, once per file. emu: tests/gemm_emu.h's CPU versions instead of PTX.
    `extra`: wgmma wrappers other kernels of the file use besides (the convolution's)."""
    uses = (set().union(*(_wgmma_uses(p) for p in plans)) if plans else set()) | set(extra)
    prims = '#include "gemm_emu.h"\n' if emu else _cuh("gemm_ptx.cuh") + wrappers(uses)
    body = _cuh("gemm_tile.cuh") + _cuh("gemm_sm80.cuh") + _cuh("gemm_sm90.cuh")
    return f"#ifndef TWG_PRELUDE\n#define TWG_PRELUDE\n{prims}{body}{_cuh('gemm_host.cuh')}#endif  // TWG_PRELUDE\n"


def _lit(x: float) -> str:
    return f"{float(x)!r}f".replace("inf", "INFINITY")


def _struct(p: GemmPlan, sname: str) -> str:
    s = p.spec
    t, to = DTYPES[s.dtype][0], DTYPES[s.dtype][0]
    ptrs = [f"const {t}* a;", f"const {t}* b;", f"{to}* out;", f"{to}* red;"]
    if s.c_strides:
        ptrs.append(f"const {to}* c;")
    ptrs += [f"const {DTYPES[x.dtype][0]}* {x.name};" for x in s.inputs]
    views = []
    for x in s.inputs:
        sb, sr, sc = x.strides
        base = f"p.{x.name} + (long long)batch * {sb}LL"
        if x.kind == "full":
            views.append(f"const twg_mat<{DTYPES[x.dtype][0]}> {x.name}{{{base}, {sr}LL, {sc}LL}};")
        else:
            views.append(f"const twg_vec<{DTYPES[x.dtype][0]}> {x.name}{{{base}, {sr if x.kind == 'row' else sc}LL}};")
        views.append(f"(void){x.name};")
    pre = []
    if s.alpha != 1.0:
        pre.append(f"acc *= {_lit(s.alpha)};")
    if s.c_strides and s.beta != 0.0:
        cb, cr, cc = s.c_strides
        pre.append(f"acc += {_lit(s.beta)} * twg_f(p.c[(long long)batch * {cb}LL + (long long)row * {cr}LL"
                   f" + (long long)col * {cc}LL]);")
    ab, am, ak = p.a
    bb, bk, bn = p.b
    ob, om, on = p.out
    rb, rm = s.reduce_strides
    rank3 = lambda sb: str(s.batch > 1 and sb != 0).lower()  # noqa: E731
    body = "\n    ".join(views + pre)
    return f"""
struct {sname} {{
  using T = {t};
  using TO = {to};
  static constexpr int M = {p.m}, N = {p.n}, K = {s.k}, BATCH = {s.batch};
  static constexpr long long SA_B = {ab}LL, SA_M = {am}LL, SA_K = {ak}LL, SB_B = {bb}LL, SB_K = {bk}LL, SB_N = {bn}LL;
  static constexpr long long SO_B = {ob}LL, SO_M = {om}LL, SO_N = {on}LL, SR_B = {rb}LL, SR_M = {rm}LL;
  static constexpr bool A_KMAJ = {str(p.a_kmaj).lower()}, B_KMAJ = {str(p.b_kmaj).lower()}, STORE = {str(s.store).lower()};
  static constexpr bool A_RANK3 = {rank3(ab)}, B_RANK3 = {rank3(bb)};
  static constexpr int PREC = {p.prec}, REDUCE = {REDUCE_OPS.get(s.reduce, 0)}, FOLD = {int(p.fold)};
  static constexpr bool B_HI_RNA = {str(s.tf32_hi == "rna").lower()};
  struct Ptrs {{ {" ".join(ptrs)} }};
  TWG_DEV static float value(const Ptrs& p, int batch, {"int col, int row" if p.swap else "int row, int col"}, float acc) {{
    {body}
    return ({s.epilogue});
  }}
  TWG_DEV static float row_value(const Ptrs& p, int batch, int row, float r) {{
    (void)p; (void)batch; (void)row;
    return ({s.reduce_expr});
  }}
}};
"""


def _tma_map(p: GemmPlan, which: str) -> str:
    """Host code filling CUtensorMap `cache.m<which>` for operand A or B (dims innermost first): K-major
    boxes are BK x rows (one per tile), MN-major boxes 128 bytes of mn x BK (gemm_tile.cuh)."""
    s, es = p.spec, DTYPES[p.spec.dtype][1]
    bk = 128 // es
    if which == "a":
        (sb, smn, sk), mn, kmaj, rows = p.a, p.m, p.a_kmaj, p.sm90[0]
    else:
        (sb, sk, smn), mn, kmaj, rows = p.b, p.n, p.b_kmaj, p.sm90[1]
    dims, stride, box = ((s.k, mn), smn, (bk, rows)) if kmaj else ((mn, s.k), sk, (bk, bk))
    rank3 = s.batch > 1 and sb != 0
    dims = (*dims, s.batch) if rank3 else dims
    strides = (stride * es, sb * es) if rank3 else (stride * es,)
    box = (*box, 1)[:len(dims)]  # NOTE: the encoder reads one box extent per dimension, batch included
    dl = ", ".join(f"{d}ull" for d in dims)
    sl = ", ".join(f"{x}ull" for x in strides)
    xl = ", ".join(f"{x}u" for x in box)
    return (f"      const cuuint64_t d{which}[] = {{{dl}}}, s{which}[] = {{{sl}}};\n"
            f"      const cuuint32_t x{which}[] = {{{xl}}};\n"
            f"      ok = ok && twg_encode(&cache.m{which}, {_TMA_TYPE[s.dtype]}, {len(dims)}, ptrs.{which}, "
            f"d{which}, s{which}, x{which});\n")


def _launcher(p: GemmPlan, sname: str, args: tuple[str, ...]) -> str:
    s = p.spec
    name, t, to = s.name, DTYPES[s.dtype][0], DTYPES[s.dtype][0]
    bm, bn, wm, wn, st = p.sm80
    k80 = f"twg_sm80<{sname}, {bm}, {bn}, {wm}, {wn}, {st}, {{}}>"
    smem80 = st * (bm + bn) * 128 + 1024
    threads80 = (bm // wm) * (bn // wn) * 32
    tiles_m, tiles_n = -(-p.m // bm), -(-p.n // bn)
    grid80 = f"dim3({tiles_m if s.reduce else tiles_m * tiles_n}u, {s.batch}u)"
    params = ", ".join([f"const void* {a}" for a in args if a not in ("out", "red")]
                       + [f"void* {a}" for a in args if a in ("out", "red")])
    fields = {"a": f"(const {t}*){'b' if p.swap else 'a'}", "b": f"(const {t}*){'a' if p.swap else 'b'}", "out": f"({to}*)out" if s.store else "nullptr",
              "red": f"({to}*)red" if s.reduce else "nullptr", "c": f"(const {to}*)c"}
    init = ", ".join([fields["a"], fields["b"], fields["out"], fields["red"]] + ([fields["c"]] if s.c_strides else [])
                     + [f"(const {DTYPES[x.dtype][0]}*){x.name}" for x in s.inputs])
    vec80 = (f"    if (vec && {int(p.vec)}) {{ auto k = {k80.format('true')}; TWG_LAUNCH(k, {grid80}, dim3({threads80}u), "
             f"{smem80}u, st, ptrs); }}\n"
             f"    else {{ auto k = {k80.format('false')}; TWG_LAUNCH(k, {grid80}, dim3({threads80}u), {smem80}u, st, ptrs); }}\n")
    if p.sm90:
        bm9, bn9, st9 = p.sm90
        k90 = f"twg_sm90<{sname}, {bm9}, {bn9}, {st9}>"
        cfg = f"twg_sm90_cfg<{sname}, {bm9}, {bn9}, {st9}>"
        t9m, t9n = -(-p.m // bm9), -(-p.n // bn9)
        grid90 = f"dim3({t9m if s.reduce else t9m * t9n}u, {s.batch}u)"
        k90_ptr = f"(const void*){k90}"
        sm90 = (f"  if (path == 90 && vec) {{\n"
                f"    // NOTE: a tensor map holds its tensor's address: encoded again only when a pointer changes\n"
                f"    static thread_local struct {{ const void* a = nullptr; const void* b = nullptr; CUtensorMap ma, mb; }} cache;\n"
                f"    bool ok = cache.a == ptrs.a && cache.b == ptrs.b;\n"
                f"    if (!ok) {{\n      ok = true;\n{_tma_map(p, 'a')}{_tma_map(p, 'b')}"
                f"      cache.a = ok ? ptrs.a : nullptr;\n      cache.b = ok ? ptrs.b : nullptr;\n    }}\n"
                f"    if (ok) {{\n      using C9 = {cfg};\n      auto k = {k90};\n"
                f"      TWG_LAUNCH(k, {grid90}, dim3(C9::THREADS), C9::SMEM, st, cache.ma, cache.mb, ptrs);\n"
                f"      return (int)cudaGetLastError();\n    }}\n  }}\n")
        smem90 = f"{cfg}::SMEM"
    else:
        sm90, k90_ptr, smem90 = "", "nullptr", "0"
    return f"""static int twg_cache_{name}[TWG_MAX_DEVICES];
static int twg_path_{name}() {{
  const void* k80[2] = {{(const void*){k80.format('true')}, (const void*){k80.format('false')}}};
  return twg_path(twg_cache_{name}, k80, {smem80}, {k90_ptr}, {smem90});
}}
extern "C" int tw_gemm_path_{name}(void) {{ return twg_path_{name}(); }}
extern "C" int tw_launch_{name}({params}, int vec, void* stream) {{
  const int path = twg_path_{name}();
  const cudaStream_t st = (cudaStream_t)stream;
  const {sname}::Ptrs ptrs{{{init}}};
{sm90}  if (path >= 80) {{
{vec80}    return (int)cudaGetLastError();
  }}
  return (int)cudaErrorNotSupported;
}}
"""


def gemm_site(spec: GemmSpec | GemmPlan) -> GemmSite:
    """The site's struct and launcher (the file needs gemm_prelude of its plans before it)."""
    p = spec if isinstance(spec, GemmPlan) else plan(spec)
    s = p.spec
    args = ("a", "b") + (("c",) if s.c_strides else ()) + tuple(x.name for x in s.inputs)
    args += (("out",) if s.store else ()) + (("red",) if s.reduce else ())
    sname = f"twg_site_{s.name}"
    head = f"\n// GEMM site {s.name}: {s.batch} x ({s.m} x {s.k}) @ ({s.k} x {s.n}) {s.dtype}, {p.describe()}\n"
    return GemmSite(p, head + _struct(p, sname) + _launcher(p, sname, args), args)


def gemm_source(specs: list[GemmSpec], emu: bool = False) -> str:
    """A standalone CUDA file for these sites (what tests and bench/gemm.py build)."""
    sites = [gemm_site(s) for s in specs]
    err = 'extern "C" const char* tw_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }\n'
    return ("// Generated by torchweld (codegen/gemm_source.py). Pure CUDA: no PyTorch headers.\n"
            + gemm_prelude([x.plan for x in sites], emu) + err + "".join(x.source for x in sites))
