"""CUDA source for convolution sites (conv_spec.py plans them): one prelude per file (the GEMM kind's tiles
and k-steps, then cuh/conv_sm80.cuh), then per site a struct of its geometry and epilogue and its
extern "C" launcher

    int tw_launch_<name>(const void* x, const void* w, [const void* bias], [epilogue inputs...], void* out,
                         int vec, void* stream)
    int tw_conv_path_<name>(void)   // 90: wgmma (sm_90a build), 80: mma.sync; 0: this device cannot run the site

`w` is the weight packed K-major (runtime/conv_select._tw_conv_pack); `vec` is 1 when x, w and out are 16-byte aligned.
The return value is a cudaError_t."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .conv_spec import GLOBAL, ConvPlan, ConvSpec, plan
from .gemm import DTYPES
from .gemm_source import gemm_prelude

CUH = Path(__file__).parent / "cuh"
REDS = {"": 0, "sum": 1, "mean": 2, "max": 3, "min": 4, "softmax": 5, "log_softmax": 6, "chan_sum": 7, "chan_mean": 8,
        "chan_max": 9, "chan_min": 10}  # S::RED (cuh/conv_reduce.cuh)
WRITTEN = ("out", "ws", "red")  # the launcher's pointers it writes


@dataclass(frozen=True)
class ConvSite:
    """A site's generated code: `source` (needs conv_prelude), its launcher's pointer arguments in order."""
    plan: ConvPlan
    source: str
    args: tuple[str, ...]


def wgmma_uses(plans: list[ConvPlan]) -> frozenset:
    """The wgmma wrappers these sites' Hopper loops call, as gemm_prelude's (kind, n, ta, tb)."""
    uses = set()
    for p in plans:
        if p.sm90:
            s = p.spec
            kind = {"float16": "ss_f16", "bfloat16": "ss_bf16"}.get(s.dtype, "rs_tf32" if p.prec == 3 else "ss_tf32")
            uses.add((kind, p.sm90[1], False, False))
    return frozenset(uses)


def conv_prelude(plans: list[ConvPlan], emu: bool = False) -> str:
    """The GEMM prelude with these sites' wgmma wrappers (skipped where the file has it already: the
    GEMM's prelude then carries them, registry.py), and the convolution main loops, once per file."""
    body = "".join((CUH / f).read_text() for f in ("conv_sm80.cuh", "conv_reduce.cuh", "conv_sm90.cuh"))
    return (gemm_prelude([], emu, wgmma_uses(plans))
            + f"#ifndef TWC_PRELUDE\n#define TWC_PRELUDE\n{body}#endif  // TWC_PRELUDE\n")


def _struct(p: ConvPlan, sname: str) -> str:
    s = p.spec
    t = DTYPES[s.dtype][0]
    ptrs = [f"const {t}* x;", f"const {t}* w;", f"{t}* out;"]
    ptrs += [f"const {DTYPES[x.dtype][0]}* {x.name};" for x in s.inputs]
    ptrs += ["float* ws;", f"{t}* red;"] if s.reduce in GLOBAL else []
    views = []
    for x in s.inputs:
        xt = DTYPES[x.dtype][0]
        if x.kind == "chan":
            views.append(f"const twc_chan<{xt}> {x.name}{{p.{x.name}, {x.strides[0]}LL}};")
        else:
            sn, sc, *sp = x.strides
            sd, sh, sw = (0,) * (3 - len(sp)) + tuple(sp)
            views.append(f"const twc_full<{xt}> {x.name}{{p.{x.name}, {sn}LL, {sc}LL, {sd}LL, {sh}LL, {sw}LL}};")
        views.append(f"(void){x.name};")
    body = "\n    ".join(views)
    chan = [line for view, x in zip(views[::2], s.inputs) if x.kind == "chan" for line in (view, f"(void){x.name};")]
    chan_body = "\n    ".join(chan)  # NOTE: after a pool only per-channel operands are read (conv_spec.unsupported)
    (idd, ih, iw), (od, oh, ow), (kd, kh, kw) = p.isz, p.osz, p.ksz
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = p.st, p.pad, p.dil
    xn, xc, xd, xh, xw = p.xs
    on, oc, osd, osh, osw = p.os
    return f"""
struct {sname} {{
  using T = {t};
  using TO = {t};
  static constexpr int M = {p.m}, N = {p.n}, K = {p.k}, CIG = {p.cig}, NB = {s.n};
  static constexpr int ID = {idd}, IH = {ih}, IW = {iw}, OD = {od}, OH = {oh}, OW = {ow}, KD = {kd}, KH = {kh}, KW = {kw};
  static constexpr int STD = {sd}, STH = {sh}, STW = {sw}, PD = {pd}, PH = {ph}, PW = {pw}, DD = {dd}, DH = {dh}, DW = {dw};
  static constexpr long long XN = {xn}LL, XC = {xc}LL, XD = {xd}LL, XH = {xh}LL, XW = {xw}LL;
  static constexpr long long ON = {on}LL, OC = {oc}LL, OSD = {osd}LL, OSH = {osh}LL, OSW = {osw}LL;
  static constexpr bool TR = {str(s.transposed).lower()}, PHASED = {str(p.phased).lower()}, A_KMAJ = true, B_KMAJ = true;
  static constexpr bool B_HI_RNA = false;
  static constexpr int POOL = {({"": 0, "max": 1, "avg": 2})[s.pool]}, WIN = {p.win[0] * p.win[1] * p.win[2]}, WD = {p.win[0]}, WH = {p.win[1]}, WW = {p.win[2]};
  static constexpr int PD_ = {p.psz[0]}, PH_ = {p.psz[1]}, PW_ = {p.psz[2]};
  static constexpr float DIV = {float(s.pool_divisor or p.win[0] * p.win[1] * p.win[2])!r}f;
  static constexpr int PREC = {p.prec}, FOLD = {int(p.prec == 3)};
  static constexpr int RED = {REDS[s.reduce]}, CO = {s.cout};
  static constexpr bool STORE = {str(s.reduce_store).lower()};
  static constexpr long long RN = {s.red_strides[0]}LL, RC = {s.red_strides[1]}LL;
  struct Ptrs {{ {" ".join(ptrs)} }};
  TWG_DEV static float value(const Ptrs& p, const twc_pix& q, int c, float acc) {{
    (void)p; (void)q; (void)c;
    {body}
    return ({s.epilogue});
  }}
  TWG_DEV static float post(const Ptrs& p, int c, float v) {{
    (void)p; (void)c;
    {chan_body}
    return ({s.post});
  }}
}};
"""


def _launcher(p: ConvPlan, sname: str, args: tuple[str, ...]) -> str:
    s = p.spec
    name, t = s.name, DTYPES[s.dtype][0]
    bm, bn, wm, wn, st = p.sm80
    k80 = f"twc_sm80<{sname}, {bm}, {bn}, {wm}, {wn}, {st}, {{}}>"
    smem = st * (bm + bn) * 128 + 1024
    threads = (bm // wm) * (bn // wn) * 32
    grid = f"dim3({-(-p.m // bm) * -(-p.n // bn)}u, {s.groups}u)"
    params = ", ".join(f"{'void' if a in WRITTEN else 'const void'}* {a}" for a in args)
    out = f"({t}*)out" if "out" in args else "nullptr"
    init = ", ".join([f"(const {t}*)x", f"(const {t}*)w", out] + [f"(const {DTYPES[x.dtype][0]}*){x.name}" for x in s.inputs]
                     + (["(float*)ws", f"({t}*)red"] if s.reduce in GLOBAL else []))
    # NOTE: a site whose input cannot be gathered in 16-byte chunks has no vector build at all
    vec = "true" if p.vec else "false"
    vec_launch = (f"  if (vec) {{ auto k = {k80.format('true')}; TWG_LAUNCH(k, {grid}, dim3({threads}u), {smem}u, st, ptrs); }}\n"
                  "  else ") if p.vec else ""
    # NOTE: a pixel reduction's final kernel reads the workspace slots of the row tiles the main kernel ran
    final = (lambda rows: f"  {{ auto kf = twc_red_final<{sname}, {rows}>; "
             f"TWG_LAUNCH(kf, dim3({-(-s.n * s.cout // 256)}u), dim3(256u), 0u, st, ptrs); }}\n") if s.reduce in GLOBAL \
        else (lambda rows: "")
    if p.sm90:
        bm9, bn9, st9 = p.sm90
        k90 = f"twc_sm90<{sname}, {bm9}, {bn9}, {st9}>"
        d90 = f"twc_sm90_cfg<{sname}, {bm9}, {bn9}, {st9}>"
        grid90 = f"dim3({-(-p.m // bm9) * -(-p.n // bn9)}u, {s.groups}u)"
        k90_ptr, smem90 = f"(const void*){k90}", f"{d90}::SMEM"
        launch90 = (f"  if (path == 90 && vec) {{\n    using D9 = {d90};\n    auto k = {k90};\n"
                    f"    TWG_LAUNCH(k, {grid90}, dim3(D9::THREADS), D9::SMEM, st, ptrs);\n{final(bm9)}"
                    "    return (int)cudaGetLastError();\n  }\n")
    else:
        k90_ptr, smem90, launch90 = "nullptr", "0", ""
    return f"""static int twc_cache_{name}[TWG_MAX_DEVICES];
static int twc_path_{name}() {{
  const void* k80[2] = {{(const void*){k80.format(vec)}, (const void*){k80.format('false')}}};
  return twg_path(twc_cache_{name}, k80, {smem}, {k90_ptr}, {smem90});
}}
extern "C" int tw_conv_path_{name}(void) {{ return twc_path_{name}(); }}
extern "C" int tw_launch_{name}({params}, int vec, void* stream) {{
  const cudaStream_t st = (cudaStream_t)stream;
  const {sname}::Ptrs ptrs{{{init}}};
  const int path = twc_path_{name}();
  if (path < 80) return (int)cudaErrorNotSupported;
{launch90}{vec_launch}  {{ auto k = {k80.format('false')}; TWG_LAUNCH(k, {grid}, dim3({threads}u), {smem}u, st, ptrs); }}
{final(bm)}  return (int)cudaGetLastError();
}}
"""


def conv_site(spec: ConvSpec | ConvPlan) -> ConvSite:
    """The site's struct and launcher (the file needs conv_prelude before it)."""
    p = spec if isinstance(spec, ConvPlan) else plan(spec)
    s = p.spec
    glob = s.reduce in GLOBAL
    args = ("x", "w") + tuple(x.name for x in s.inputs) + (("out",) if s.reduce_store or not glob else ()) \
        + (("ws", "red") if glob else ())
    sname = f"twc_site_{s.name}"
    head = (f"\n// convolution site {s.name}: {s.n} x {s.cin} x {'x'.join(map(str, s.size))} -> {s.cout} channels, "
            f"kernel {'x'.join(map(str, s.kernel))}, stride {s.stride}, padding {s.padding}, dilation {s.dilation}"
            f"{f', output padding {s.output_padding}' if s.transposed else ''}, groups {s.groups}, {s.dtype}: {p.describe()}\n")
    return ConvSite(p, head + _struct(p, sname) + _launcher(p, sname, args), args)


def conv_source(specs: list[ConvSpec], emu: bool = False) -> str:
    """A standalone CUDA file for these sites (what tests and bench/conv.py build)."""
    sites = [conv_site(s) for s in specs]
    err = 'extern "C" const char* tw_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }\n'
    return ("// Generated by torchweld (codegen/conv_source.py). Pure CUDA: no PyTorch headers.\n"
            + conv_prelude([x.plan for x in sites], emu) + err + "".join(x.source for x in sites))
