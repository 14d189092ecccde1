"""Inline SVG charts written by hand: the report must open offline, with nothing fetched or executed.

Each function returns one `<svg class="chart" data-chart=KIND>` element; marks carry a `<title>` so
hovering shows the exact figures. Three kinds: a histogram (SOL scores), a log-log scatter with the
y = x speed-of-light line (achieved time vs T_SOL), and horizontal log-scale bars (speedups).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FAIL_COLOUR = "#d62728"
REFERENCE_COLOUR = "#444"
FONT = 'font-family="system-ui, sans-serif" font-size="11"'
LABEL_BREAK = " · "  # a bar label's parts, drawn one under the other


def text_px(text: str, font_px: float) -> float:
    """A generous estimate of a text's rendered width (system-ui averages about 0.55 em a character), so
    a chart can be made wide enough for its longest label or title instead of cutting it."""
    return len(text) * font_px * 0.62


def title_width(title: str, minimum: int) -> int:
    """A chart's width: `minimum`, or wider to hold its title (13 px) whole."""
    return max(minimum, math.ceil(text_px(title, 13) + 24))


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.0e}".replace("e-0", "e-").replace("e+0", "e")
    return f"{value:g}"


@dataclass(frozen=True)
class Plot:
    """Plot area inside an SVG of `width` x `height` pixels, with margins for axes and titles."""

    width: int = 420
    height: int = 300
    left: int = 56
    right: int = 16
    top: int = 34
    bottom: int = 46

    @property
    def x0(self) -> float:
        return self.left

    @property
    def x1(self) -> float:
        return self.width - self.right

    @property
    def y0(self) -> float:  # bottom (screen y grows downwards)
        return self.height - self.bottom

    @property
    def y1(self) -> float:
        return self.top

    def open(self, kind: str, title: str) -> list[str]:
        return [f'<svg class="chart" data-chart="{kind}" xmlns="http://www.w3.org/2000/svg" '
                f'width="{self.width}" height="{self.height}" viewBox="0 0 {self.width} {self.height}" '
                f'role="img" aria-label="{escape(title)}" {FONT}>',
                f'<rect class="bg" x="0" y="0" width="{self.width}" height="{self.height}" fill="#fff"/>',
                f'<text class="title" x="{self.width / 2}" y="18" text-anchor="middle" font-size="13" '
                f'font-weight="600">{escape(title)}</text>']

    def axis_labels(self, x_label: str, y_label: str) -> list[str]:
        cy = (self.y0 + self.y1) / 2
        return [f'<text class="xlabel" x="{(self.x0 + self.x1) / 2}" y="{self.height - 8}" '
                f'text-anchor="middle">{escape(x_label)}</text>',
                f'<text class="ylabel" x="14" y="{cy}" text-anchor="middle" '
                f'transform="rotate(-90 14 {cy})">{escape(y_label)}</text>',
                f'<line x1="{self.x0}" y1="{self.y0}" x2="{self.x1}" y2="{self.y0}" stroke="#333"/>',
                f'<line x1="{self.x0}" y1="{self.y0}" x2="{self.x0}" y2="{self.y1}" stroke="#333"/>']


@dataclass(frozen=True)
class Scale:
    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool = False

    def __call__(self, value: float) -> float:
        f = (lambda v: math.log10(v)) if self.log else (lambda v: v)
        span = f(self.hi) - f(self.lo) or 1.0
        return self.px_lo + (f(value) - f(self.lo)) / span * (self.px_hi - self.px_lo)

    def ticks(self) -> list[float]:
        if self.log:
            return [10.0 ** e for e in range(math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi)) + 1)
                    if self.lo <= 10.0 ** e <= self.hi]
        step = _nice_step((self.hi - self.lo) / 5)
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def log_bounds(values: Sequence[float], pad: float = 1.5) -> tuple[float, float]:
    """Decade-ish bounds around positive values (at least one decade wide so ticks exist)."""
    lo, hi = min(values) / pad, max(values) * pad
    lo = min(lo, 10 ** math.floor(math.log10(lo)))
    hi = max(hi, 10 ** math.ceil(math.log10(hi)))
    return lo, hi


def _grid(plot: Plot, xs: Scale | None, ys: Scale | None) -> list[str]:
    out = []
    for t in xs.ticks() if xs else []:
        x = xs(t)
        out += [f'<line class="grid" x1="{x:.1f}" y1="{plot.y0}" x2="{x:.1f}" y2="{plot.y1}" stroke="#eee"/>',
                f'<text class="tick" x="{x:.1f}" y="{plot.y0 + 14}" text-anchor="middle">{_fmt(t)}</text>']
    for t in ys.ticks() if ys else []:
        y = ys(t)
        out += [f'<line class="grid" x1="{plot.x0}" y1="{y:.1f}" x2="{plot.x1}" y2="{y:.1f}" stroke="#eee"/>',
                f'<text class="tick" x="{plot.x0 - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>']
    return out


def _legend(plot: Plot, entries: Sequence[tuple[str, str, str]], corner: str = "top-left") -> list[str]:
    """Entries of (label, colour, shape: 'dot' | 'ring' | 'box' | 'line') in a corner of the plot area."""
    out = []
    width = 24 + 6 * max((len(e[0]) for e in entries), default=0)
    for i, (label, col, shape) in enumerate(entries):
        if corner == "bottom-right":
            x, y = plot.x1 - width, plot.y0 - 10 - 14 * (len(entries) - 1 - i)
        else:
            x, y = plot.x0 + 8, plot.y1 + 10 + 14 * i
        mark = {"dot": f'<circle cx="{x}" cy="{y}" r="4" fill="{col}"/>',
                "ring": f'<circle cx="{x}" cy="{y}" r="4" fill="none" stroke="{col}" stroke-width="1.5"/>',
                "line": f'<line x1="{x - 6}" y1="{y}" x2="{x + 6}" y2="{y}" stroke="{col}" stroke-width="2"/>',
                }.get(shape, f'<rect x="{x - 4}" y="{y - 4}" width="8" height="8" fill="{col}"/>')
        out += [f'<g class="legend">{mark}<text x="{x + 10}" y="{y + 4}">{escape(label)}</text></g>']
    return out


def empty(kind: str, title: str, reason: str, plot: Plot = Plot(height=120)) -> str:
    """A placeholder saying why a chart has no data (e.g. no speed-of-light analysis in the traces)."""
    out = plot.open(kind, title)
    out.append(f'<text class="empty" x="{plot.width / 2}" y="{plot.height / 2 + 10}" text-anchor="middle" '
               f'fill="#777">{escape(reason)}</text>')
    return "\n".join(out + ["</svg>"])


def score_histogram(scores: Sequence[float], failed: int, title: str = "SOL score distribution",
                    bins: int = 10, empty_reason: str | None = None) -> str:
    """Workload counts per SOL-score bin in [0, 1]; failed workloads (score 0) stacked in red in the first bin."""
    if not scores and not failed:
        return empty("sol-histogram", title, empty_reason or "no SOL scores in these traces (n/a)")
    plot = Plot(width=title_width(title, 560), height=300)
    counts = [0] * bins
    for s in scores:
        counts[min(bins - 1, max(0, int(s * bins)))] += 1
    top = max([c + (failed if i == 0 else 0) for i, c in enumerate(counts)] + [1])
    xs = Scale(0.0, 1.0, plot.x0, plot.x1)
    ys = Scale(0.0, top * 1.1, plot.y0, plot.y1)
    out = plot.open("sol-histogram", title) + _grid(plot, xs, ys)
    width = (plot.x1 - plot.x0) / bins
    for i, count in enumerate(counts):
        x = plot.x0 + i * width + 1
        lo, hi = i / bins, (i + 1) / bins
        if count:
            out.append(f'<rect class="bar" x="{x:.1f}" y="{ys(count):.1f}" width="{width - 2:.1f}" '
                       f'height="{plot.y0 - ys(count):.1f}" fill="{colour(0)}"><title>score {lo:.1f}-{hi:.1f}: '
                       f'{count} passed workload(s)</title></rect>')
        if i == 0 and failed:
            out.append(f'<rect class="bar failed" x="{x:.1f}" y="{ys(count + failed):.1f}" width="{width - 2:.1f}" '
                       f'height="{ys(count) - ys(count + failed):.1f}" fill="{FAIL_COLOUR}"><title>{failed} failed '
                       f'workload(s), scored 0</title></rect>')
    out += _legend(plot, [("passed", colour(0), "box")] + ([("failed (score 0)", FAIL_COLOUR, "box")] if failed else []))
    out += plot.axis_labels("SOL score (1 = speed of light, 0.5 = baseline)", "workloads")
    return "\n".join(out + ["</svg>"])


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    series: int  # colour index
    label: str  # hover text
    hollow: bool = False


def sol_scatter(points: Sequence[Point], series: Sequence[tuple[str, int]], title: str,
                has_reference: bool = False) -> str:
    """Achieved latency against T_SOL, both log scales; y = x is the speed of light, nothing may go below it."""
    pts = [p for p in points if p.x > 0 and p.y > 0]
    if not pts:
        return empty("roofline", title, "no T_SOL for these workloads (n/a)")
    plot = Plot(width=title_width(title, 420), height=320)
    lo, hi = log_bounds([v for p in pts for v in (p.x, p.y)])
    xs, ys = Scale(lo, hi, plot.x0, plot.x1, log=True), Scale(lo, hi, plot.y0, plot.y1, log=True)
    out = plot.open("roofline", title) + _grid(plot, xs, ys)
    out.append(f'<line class="sol-line" x1="{xs(lo):.1f}" y1="{ys(lo):.1f}" x2="{xs(hi):.1f}" y2="{ys(hi):.1f}" '
               f'stroke="#000" stroke-dasharray="5 3"><title>speed of light: latency = T_SOL</title></line>')
    for factor in (10,):
        if lo * factor < hi:
            out.append(f'<line class="guide" x1="{xs(lo):.1f}" y1="{ys(lo * factor):.1f}" x2="{xs(hi / factor):.1f}" '
                       f'y2="{ys(hi):.1f}" stroke="#bbb" stroke-dasharray="2 3"><title>{factor}x T_SOL</title></line>')
    for p in pts:
        fill = 'fill="none" stroke-width="1.5"' if p.hollow else 'fill-opacity="0.85"'
        col = REFERENCE_COLOUR if p.hollow else colour(p.series)
        out.append(f'<circle class="point{" ref" if p.hollow else ""}" cx="{xs(p.x):.1f}" cy="{ys(p.y):.1f}" r="4" '
                   f'{"stroke" if p.hollow else "fill"}="{col}" {fill}><title>{escape(p.label)}</title></circle>')
    entries = [(name, colour(i), "dot") for name, i in series]
    entries += [("reference", REFERENCE_COLOUR, "ring")] if has_reference else []
    entries += [("speed of light (y = x)", "#000", "line")]
    out += _legend(plot, entries, corner="bottom-right")  # below y = x: faster than light, so empty
    out += plot.axis_labels("T_SOL (ms, log)", "measured latency (ms, log)")
    return "\n".join(out + ["</svg>"])


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    series: int
    note: str = ""


def speedup_bars(bars: Sequence[Bar], series: Sequence[tuple[str, int]], title: str = "Speedup over the reference",
                 x_label: str = "geometric-mean speedup over the reference (log; 1 = reference)") -> str:
    """Horizontal bars on a log scale starting at 1x, so 0.5x and 2x are equally long, in opposite directions."""
    bars = [b for b in bars if b.value > 0 and math.isfinite(b.value)]
    if not bars:
        return empty("speedup", title, "no speedups in these traces (n/a)")
    lines = [b.label.split(LABEL_BREAK) for b in bars]  # "problem · solution": one line each
    row_px = 18 + 13 * (max(len(parts) for parts in lines) - 1)
    label_px = math.ceil(16 + max(text_px(part, 11) for parts in lines for part in parts))
    plot = Plot(width=label_px + 420, height=60 + row_px * len(bars) + 14 * len(series), left=label_px,
                top=34 + 14 * len(series))
    lo, hi = log_bounds([b.value for b in bars] + [1.0], pad=1.2)
    xs = Scale(lo, hi, plot.x0, plot.x1, log=True)
    out = plot.open("speedup", title) + _grid(plot, xs, None)
    for i, b in enumerate(bars):
        y = plot.y1 + 6 + i * row_px
        a, z = sorted((xs(1.0), xs(b.value)))
        spans = "".join(f'<tspan x="{plot.x0 - 6}" dy="{0 if n == 0 else 13}">{"· " if n else ""}{escape(part)}</tspan>'
                        for n, part in enumerate(lines[i]))
        out.append(f'<text class="bar-label" x="{plot.x0 - 6}" y="{y + 11}" text-anchor="end">{spans}</text>')
        out.append(f'<rect class="bar" x="{a:.1f}" y="{y}" width="{max(z - a, 1):.1f}" height="{row_px - 5}" '
                   f'fill="{colour(b.series)}"><title>{escape(b.label)}: {b.value:.3g}x {escape(b.note)}</title></rect>')
        out.append(f'<text class="bar-value" x="{z + 3:.1f}" y="{y + 11}">{b.value:.2f}x</text>')
    one = xs(1.0)
    out.append(f'<line class="unity" x1="{one:.1f}" y1="{plot.y0}" x2="{one:.1f}" y2="{plot.y1}" stroke="#000"/>')
    legend_plot = Plot(width=plot.width, height=plot.height, left=plot.left, top=22)
    out += _legend(legend_plot, [(name, colour(i), "box") for name, i in series])
    out += plot.axis_labels(x_label, "")
    return "\n".join(out + ["</svg>"])
