"""The "gemm" kernel kind: a GEMM site the plan records (plan/gemm_ours.py) as a GemmSpec for our
generator (gemm.py, gemm_source.py), its epilogue the folded pointwise kernel's ops as one C++
expression, the way pointwise.py computes member nodes."""
from __future__ import annotations

from torchweld.codegen.common import compute
from torchweld.codegen.gemm import EpilogueInput, GemmSpec, plan, unsupported
from torchweld.codegen.gemm_source import GemmSite, gemm_prelude, gemm_site
from torchweld.ir import Graph, Kernel
from torchweld.plan.gemm_ours import OursGemm, Operand


def _kind(x: Operand) -> str:
    """How the epilogue reads an operand: per row, per column, or at (row, column)."""
    sb, sm, sn = x.strides
    if sb == 0 and sn == 0 and sm != 0:
        return "row"
    if sb == 0 and sm == 0:
        return "col"
    return "full"


def _read(x: Operand) -> str:
    return {"row": f"e_{x.name}[row]", "col": f"e_{x.name}[col]", "full": f"e_{x.name}(row, col)"}[_kind(x)]


def epilogue(site: OursGemm, graph: Graph) -> str:
    """The folded kernel's ops over `acc` as one C++ float expression (an immediately invoked lambda)."""
    if not site.folded:
        return "acc"
    nodes = graph.by_name()
    k = site.kernel
    anchor = list(k.nodes).index(k.anchor)
    chain = [m for m in k.nodes[anchor:] if nodes[m].op == "aten"]  # the GEMM and the views reshaping it
    members = [m for m in k.nodes if m not in chain]
    lines = [f"const float {m} = acc; (void){m};" for m in chain]
    lines += [f"const float {x.name} = {_read(x)};" for x in site.epilogue]
    lines += [compute(nodes[m]) for m in members]
    body = " ".join(lines)
    return f"[&]() -> float {{ {body} return (float){k.outputs[0]}; }}()"


def spec(site: OursGemm, graph: Graph | None = None) -> GemmSpec:
    """The GemmSpec our generator builds for `site` (the epilogue needs `graph`: "acc" without it)."""
    c = site.c
    return GemmSpec(name=site.kernel.name or "site", m=site.m, n=site.n, k=site.k, batch=site.batch, dtype=site.dtype,
                    precision=site.precision, a_strides=site.a.strides, b_strides=site.b.strides,
                    out_strides=(site.m * site.n, site.n, 1), alpha=site.alpha, beta=site.beta if c else 0.0,
                    c_strides=c.strides if c else None,
                    epilogue=epilogue(site, graph) if graph is not None else "acc",
                    inputs=tuple(EpilogueInput(f"e_{x.name}", _kind(x), x.strides, x.dtype) for x in site.epilogue))


def check(site: OursGemm) -> tuple[str | None, str]:
    """(why our generator cannot build `site`, "") or (None, its tile and precision description)."""
    s = spec(site)
    why = unsupported(s)
    return (why, "") if why else (None, plan(s).describe())


def built(site: OursGemm, graph: Graph) -> GemmSite:
    """The site's generated code: source, and its launcher's pointer arguments in order."""
    return gemm_site(spec(site, graph))


def operands(site: OursGemm) -> list[str]:
    """The graph values the launcher takes, in its pointer order (before the output)."""
    return [site.a.name, site.b.name] + ([site.c.name] if site.c else []) + [x.name for x in site.epilogue]


def source(k: Kernel, graph: Graph, site: OursGemm) -> str:
    """Kernel `k`'s source (the prelude comes once per file, from `prelude`)."""
    return f"// {k.name}: our GEMM {k.anchor} with {len(k.nodes) - 1} folded ops\n" + built(site, graph).source


def prelude(sites: list[OursGemm], graph: Graph, extra: frozenset = frozenset()) -> str:
    """The GEMM main loops, once per file (`extra`: wgmma wrappers the file's convolutions use)."""
    return gemm_prelude([built(s, graph).plan for s in sites], extra=extra)
