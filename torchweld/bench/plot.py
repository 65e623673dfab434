"""speedups.png: per-problem speedup vs eager and vs torch.compile, sorted, log scale, coloured by category."""
from __future__ import annotations

import math
from pathlib import Path

from torchweld.bench.metrics import correct_speedups, geomean, is_correct, speedup

_TITLES = {"eager": "vs eager PyTorch", "compile": "vs torch.compile"}
_MAX_LABELS = 90  # beyond this, per-bar names are an unreadable smear: show counts only


def plot_speedups(results: list[dict], path: Path) -> str | None:
    """Write the PNG; returns None, or a one-line note saying why there is no plot."""
    try:
        # The OO API with an Agg canvas: no pyplot global state, no display needed.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    cats = sorted({str(r.get("category", "root")) for r in results})
    colours = _palette(len(cats))
    colour = dict(zip(cats, colours))
    n = max((len(_points(results, b)) for b in _TITLES), default=0)
    labelled = n <= _MAX_LABELS
    longest = max((len(str(r.get("name", ""))) for r in results), default=10)
    # Labelled bars need ~0.3in each to keep names apart; unlabelled ones just fill a wide page.
    width = min(max(8.0, 0.30 * n + 2.5), 30.0) if labelled else 16.0
    # Room under each panel for vertical names, which need ~0.075in per character at 7.5pt.
    label_h = 0.075 * min(longest, 42) if labelled else 0.3
    fig = Figure(figsize=(width, 2 * (3.6 + label_h) + 0.8), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 1)
    for ax, baseline in zip(axes, _TITLES):
        _panel(ax, results, baseline, colour, labelled)
    handles = [_swatch(colour[c]) for c in cats]
    if cats:
        fig.legend(handles, cats, loc="upper center", ncol=min(len(cats), 8), frameon=False, fontsize=9,
                   title="category", title_fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94 if cats else 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return None


def _points(results: list[dict], baseline: str) -> list[tuple[float, dict]]:
    pts = [(s, r) for r in results if is_correct(r) and (s := speedup(r, baseline)) is not None]
    return sorted(pts, key=lambda p: p[0], reverse=True)


def _panel(ax, results: list[dict], baseline: str, colour: dict, labelled: bool) -> None:
    pts = _points(results, baseline)
    missing = len(results) - len(pts)
    g = geomean(correct_speedups(results, baseline))
    title = f"Speedup {_TITLES[baseline]}"
    if g is not None:
        title += f"   (geomean {g:.2f}x over {len(pts)} correct)"
    ax.set_title(title, fontsize=11, loc="left")
    if not pts:
        ax.text(0.5, 0.5, "no correct problems with timings", ha="center", va="center", transform=ax.transAxes,
                fontsize=11, color="#666")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    xs = range(len(pts))
    values = [s for s, _ in pts]
    # Bars grow from 1.0 so speedups point up and slowdowns point down on the log axis.
    ax.bar(xs, [v - 1 for v in values], bottom=1.0, width=0.8 if labelled else 1.0,
           color=[colour[str(r.get("category", "root"))] for _, r in pts], edgecolor="none")
    ax.axhline(1.0, color="#222", linewidth=1.0)
    ax.set_yscale("log")
    lo, hi = min(values + [1.0]), max(values + [1.0])
    ax.set_ylim(lo / 1.35, hi * 1.35)
    ax.yaxis.set_major_formatter(_times_formatter())
    ax.yaxis.set_minor_formatter(_times_formatter(minor=True))
    ax.tick_params(axis="y", which="both", labelsize=8)
    ax.set_ylabel("speedup (log scale)")
    ax.grid(axis="y", which="both", color="#ddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xlim(-0.7, len(pts) - 0.3)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if labelled:
        ax.set_xticks(list(xs))
        ax.set_xticklabels([_short(str(r.get("name", "?"))) for _, r in pts], rotation=90, fontsize=7.5)
        if len(pts) <= 40:
            for x, v in zip(xs, values):
                ax.annotate(f"{v:.2f}", (x, v), xytext=(0, 2 if v >= 1 else -2), textcoords="offset points",
                            ha="center", va="bottom" if v >= 1 else "top", fontsize=6.5, color="#333")
    else:
        ax.set_xticks([])
        ax.set_xlabel(f"{len(pts)} problems, fastest first")
    if missing:
        ax.text(1.0, 1.02, f"{missing} not shown (failed or untimed)", ha="right", va="bottom",
                transform=ax.transAxes, fontsize=8, color="#888")


def _short(name: str, limit: int = 42) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _palette(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _swatch(c):
    from matplotlib.patches import Patch

    return Patch(facecolor=c, edgecolor="none")


def _times_formatter(minor: bool = False):
    from matplotlib.ticker import FuncFormatter

    def fmt(v, _pos):
        if v <= 0:
            return ""
        if minor:
            # Only a few minor labels (2x, 5x, 0.5x ...) so the axis stays legible.
            lead = round(v / 10 ** math.floor(math.log10(v)), 6)
            if lead not in (2, 5):
                return ""
        return f"{v:g}x"

    return FuncFormatter(fmt)
