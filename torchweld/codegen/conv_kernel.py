"""The "conv" kernel kind: a convolution site the plan records (plan/conv_ours.py) as a ConvSpec for
our generator (conv_spec.py, conv_source.py), its epilogue the convolution's bias and the folded pointwise
kernel's ops as one C++ expression, the way pointwise.py computes member nodes.

The kernel reads the input channels-last (the wrapper lays it out so), the weight packed
(runtime/conv_select._tw_conv_pack), the epilogue's operands through their captured strides, and
writes its output contiguous, as every kernel does."""
from __future__ import annotations

from math import prod

from torchweld.codegen.common import compute
from torchweld.codegen.conv_spec import GLOBAL, ConvInput, ConvSpec, channels_last, plan, unsupported
from torchweld.codegen.conv_source import ConvSite, conv_prelude, conv_site, wgmma_uses
from torchweld.ir import Graph, Kernel
from torchweld.plan.conv_ours import CHANNELS, PIXELS, OursConv

SPLITS = {"max_pool", "avg_pool", *PIXELS, *CHANNELS}


def _read(name: str, kind: str) -> str:
    return f"e_{name}[c]" if kind == "chan" else f"e_{name}(q, c)"


def epilogue(site: OursConv, graph: Graph | None) -> str:
    """The convolution's bias and the folded kernel's ops over `acc` as one C++ float expression (with a
    pool: the ops before it, ending at the pool's input)."""
    conv = site.kernel.anchor
    value = f"acc + {_read(site.bias, 'chan')}" if site.bias else "acc"
    if not (site.folded or site.also) or graph is None:
        return value
    nodes = graph.by_name()
    k = site.kernel
    members, result = [m for m in k.nodes if m != conv], k.outputs[0]
    if site.pool or site.reduce:
        split = _split(site, nodes)
        members, result = members[:members.index(split)], nodes[split].args[0]
    used = {a for m in members for a in nodes[m].inputs()}
    lines = [f"const float {conv} = {value}; (void){conv};"]
    lines += [f"const float {x.name} = {_read(x.name, x.kind)};" for x in site.epilogue if x.name in used]
    lines += [compute(nodes[m]) for m in members]
    return f"[&]() -> float {{ {' '.join(lines)} return (float){result}; }}()"


def _split(site: OursConv, nodes: dict) -> str:
    """The folded pool or reduction: the ops before it run on each output, the ops after it on its result."""
    return next(m for m in site.kernel.nodes[1:] if nodes[m].op in SPLITS)


def post(site: OursConv, graph: Graph | None) -> str:
    """The folded kernel's ops after its pool or reduction, over `v` (its value), as one C++ expression."""
    if not (site.pool or site.reduce) or graph is None:
        return "v"
    nodes = graph.by_name()
    members = [m for m in site.kernel.nodes if m != site.kernel.anchor]
    split = _split(site, nodes)
    after = members[members.index(split) + 1:]
    used = {a for m in after for a in nodes[m].inputs()}
    lines = [f"const float {split} = v; (void){split};"]
    lines += [f"const float {x.name} = {_read(x.name, 'chan')};" for x in site.epilogue if x.name in used]
    lines += [compute(nodes[m]) for m in after]
    return f"[&]() -> float {{ {' '.join(lines)} return (float){site.kernel.outputs[-1]}; }}()"


def _contiguous(shape: tuple) -> tuple:
    return tuple(prod(shape[i + 1:]) for i in range(len(shape)))


def _out_strides(site: OursConv) -> tuple:
    """Contiguous strides of what `out` holds: the full output for a pixel reduction (stored or not: its result
    is at red_strides), (n, 1, spatial...) for a channel one (keepdim or not), else the kernel's output."""
    if site.reduce in GLOBAL:
        return _contiguous(tuple(site.kernel.shape))
    if site.reduce.startswith("chan_"):
        return _contiguous((site.n, 1, *site.kernel.shape[2:]))
    return _contiguous(site.out_shape)


def spec(site: OursConv, graph: Graph | None = None) -> ConvSpec:
    """The ConvSpec our generator builds for `site` (the folded ops need `graph`)."""
    ins = (ConvInput(f"e_{site.bias}", "chan", (1,), site.dtype),) if site.bias else ()
    ins += tuple(ConvInput(f"e_{x.name}", x.kind, x.strides, x.dtype) for x in site.epilogue if x.name != site.bias)
    pixels = site.reduce in GLOBAL
    return ConvSpec(name=site.kernel.name or "site", n=site.n, cin=site.cin, cout=site.cout, size=site.size,
                    kernel=site.kernel_size, stride=site.stride, padding=site.padding, dilation=site.dilation,
                    output_padding=site.output_padding, groups=site.groups, transposed=site.transposed,
                    dtype=site.dtype, precision=site.precision, x_strides=channels_last((site.n, site.cin, *site.size)),
                    out_strides=_out_strides(site),
                    epilogue=epilogue(site, graph), inputs=ins, pool=site.pool, pool_window=site.pool_window,
                    pool_divisor=site.pool_divisor, post=post(site, graph), reduce=site.reduce, reduce_store=bool(site.also),
                    red_strides=_contiguous(site.out_shape)[:2] if pixels else ())


def check(site: OursConv) -> tuple[str | None, str]:
    """(why our generator cannot build `site`, "") or (None, its description)."""
    s = spec(site)
    why = unsupported(s)
    return (why, "") if why else (None, plan(s).describe())


def built(site: OursConv, graph: Graph) -> ConvSite:
    """The site's generated code: source, and its launcher's pointer arguments in order."""
    return conv_site(spec(site, graph))


def operands(site: OursConv) -> list[str]:
    """The graph values the launcher takes, in its pointer order (before the output)."""
    return [site.x, site.w] + ([site.bias] if site.bias else []) + [x.name for x in site.epilogue if x.name != site.bias]


def source(k: Kernel, graph: Graph, site: OursConv) -> str:
    """Kernel `k`'s source (the prelude comes once per file, from `prelude`)."""
    return f"// {k.name}: our convolution {k.anchor} with {len(k.nodes) - 1} folded ops\n" + built(site, graph).source


def prelude(sites: list[OursConv], graph: Graph) -> str:
    """The convolution main loops (after the GEMM prelude where the file has one), once per file."""
    return conv_prelude([built(s, graph).plan for s in sites])


def uses(sites: list[OursConv], graph: Graph) -> frozenset:
    """The wgmma wrappers these sites call (a file with GEMM sites too has them in the GEMM's prelude)."""
    return wgmma_uses([built(s, graph).plan for s in sites])
