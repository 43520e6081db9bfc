"""Small inline SVG plots for the report site: score lines against a threshold, sparklines, bars.

Hand-written rather than a plotting library: the site must open from disk with no network and no
multi-megabyte script per page, every label is text an attacker may have written (escaped here,
never parsed as markup or math), and each point carries a ``<title>`` so hovering shows its value.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PALETTE", "Series", "bar_chart", "line_plot", "sparkline"]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd")
THRESHOLD_COLOR = "#d62728"
SHADOW_COLOR = "#9467bd"
_CLIP = 1e6  # plotted values are clipped here (a score can be +inf)


@dataclass
class Series:
    """One line: its name (legend and tooltips), per-step values (None: no value at that step), style."""

    name: str
    values: Sequence[float | None]
    color: str = PALETTE[0]
    width: float = 2.0
    dash: bool = False
    css: str = "series"


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _finite(values: Sequence[float | None]) -> list[float]:
    return [max(-_CLIP, min(_CLIP, float(v))) for v in values if v is not None and not math.isnan(float(v))]


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.ceil(low / step) * step
    out: list[float] = []
    value = start
    while value <= high + 1e-9 * step and len(out) < 20:
        out.append(round(value, 12))
        value += step
    return out


def line_plot(series: Sequence[Series], *, title: str, threshold: float | None = None, onset: int | None = None,
              alarm: int | None = None, width: int = 760, height: int = 280, y_label: str = "score",
              css_id: str = "") -> str:
    """Per-step lines against the threshold (dashed red), the labelled onset (orange) and the alarm (x)."""
    steps = max((len(s.values) for s in series), default=0)
    values = [v for s in series for v in _finite(s.values)] + ([threshold] if threshold is not None else [])
    values = [v for v in values if math.isfinite(v)]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 1e-9:
        low, high = low - 1.0, high + 1.0
    pad = (high - low) * 0.08
    low, high = low - pad, high + pad
    left, right, top, bottom = 56, 16, 34, 34
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(i: float) -> float:
        return left + (plot_w * i / max(steps - 1, 1) if steps > 1 else plot_w / 2)

    def y(v: float) -> float:
        v = max(-_CLIP, min(_CLIP, v))
        return top + plot_h * (1 - (v - low) / (high - low))

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='plot' role='img' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}'" + (f" id='{_esc(css_id)}'" if css_id else "") +
             f"><title>{_esc(title)}</title>",
             f"<rect x='{left}' y='{top}' width='{plot_w}' height='{plot_h}' fill='#fafafa' stroke='#ccc'/>"]
    for tick in _ticks(low, high):
        parts.append(f"<line x1='{left}' x2='{left + plot_w}' y1='{y(tick):.1f}' y2='{y(tick):.1f}' stroke='#eee'/>"
                     f"<text x='{left - 6}' y='{y(tick) + 4:.1f}' font-size='11' text-anchor='end'>{_fmt(tick)}</text>")
    every = max(1, math.ceil(steps / 20))
    for i in range(0, steps, every):
        parts.append(f"<text x='{x(i):.1f}' y='{top + plot_h + 16}' font-size='11' text-anchor='middle'>{i}</text>")
    parts.append(f"<text x='{left + plot_w / 2:.0f}' y='{height - 4}' font-size='11' text-anchor='middle'>step</text>"
                 f"<text x='12' y='{top + plot_h / 2:.0f}' font-size='11' text-anchor='middle' "
                 f"transform='rotate(-90 12 {top + plot_h / 2:.0f})'>{_esc(y_label)}</text>")
    if onset is not None and 0 <= onset < max(steps, 1):
        parts.append(f"<line class='onset' x1='{x(onset):.1f}' x2='{x(onset):.1f}' y1='{top}' y2='{top + plot_h}' "
                     f"stroke='#ff7f0e' stroke-width='2'><title>labelled onset: step {onset}</title></line>")
    if threshold is not None and math.isfinite(threshold):
        parts.append(f"<line class='threshold' x1='{left}' x2='{left + plot_w}' y1='{y(threshold):.1f}' "
                     f"y2='{y(threshold):.1f}' stroke='{THRESHOLD_COLOR}' stroke-width='1.5' stroke-dasharray='6 4'>"
                     f"<title>threshold {_fmt(threshold)}</title></line>")
    for s in series:
        points = [(i, max(-_CLIP, min(_CLIP, float(v)))) for i, v in enumerate(s.values)
                  if v is not None and not math.isnan(float(v))]
        if not points:
            continue
        dash = " stroke-dasharray='5 3'" if s.dash else ""
        path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in points)
        parts.append(f"<g class='{_esc(s.css)}' data-name='{_esc(s.name)}'><polyline fill='none' stroke='{s.color}' "
                     f"stroke-width='{s.width}'{dash} points='{path}'/>")
        for i, v in points:
            parts.append(f"<circle cx='{x(i):.1f}' cy='{y(v):.1f}' r='{2.5 if s.width >= 2 else 1.6}' fill='{s.color}'>"
                         f"<title>{_esc(s.name)}, step {i}: {_fmt(v)}</title></circle>")
        parts.append("</g>")
    if alarm is not None:
        first = next((s for s in series if alarm < len(s.values) and s.values[alarm] is not None), None)
        if first is not None:
            value = float(first.values[alarm])  # type: ignore[arg-type]
            cx, cy = x(alarm), y(value)
            parts.append(f"<g class='alarm'><path d='M{cx - 7:.1f},{cy - 7:.1f} L{cx + 7:.1f},{cy + 7:.1f} "
                         f"M{cx - 7:.1f},{cy + 7:.1f} L{cx + 7:.1f},{cy - 7:.1f}' stroke='{THRESHOLD_COLOR}' "
                         f"stroke-width='3'/><title>alarm at step {alarm}</title></g>")
    legend_x: float = left
    entries: list[tuple[str, str, bool]] = [(s.name, s.color, s.dash) for s in series]
    if threshold is not None:
        entries.append((f"threshold {_fmt(threshold)}", THRESHOLD_COLOR, True))
    for name, color, dashed in entries[:10]:
        short = name if len(name) <= 28 else name[:27] + "…"
        parts.append(f"<line x1='{legend_x}' x2='{legend_x + 18}' y1='14' y2='14' stroke='{color}' stroke-width='2'"
                     + (" stroke-dasharray='5 3'" if dashed else "") +
                     f"/><text x='{legend_x + 22}' y='18' font-size='11'>{_esc(short)}</text>")
        legend_x += 30 + 6.5 * len(short)
        if legend_x > width - 80:
            break
    parts.append("</svg>")
    return "".join(parts)


def sparkline(values: Sequence[float | None], *, threshold: float | None = None, alarm: int | None = None,
              width: int = 130, height: int = 26) -> str:
    """A row-sized score line (every episode gets one: none is left undrawn)."""
    finite = _finite(values) + ([threshold] if threshold is not None and math.isfinite(threshold) else [])
    if not _finite(values):
        return "<span class='muted'>no scores</span>"
    low, high = min(finite), max(finite)
    if high - low < 1e-9:
        low, high = low - 1, high + 1
    n = len(values)

    def x(i: int) -> float:
        return 2 + (width - 4) * i / max(n - 1, 1)

    def y(v: float) -> float:
        return 2 + (height - 4) * (1 - (max(-_CLIP, min(_CLIP, v)) - low) / (high - low))

    points = " ".join(f"{x(i):.1f},{y(float(v)):.1f}" for i, v in enumerate(values)
                      if v is not None and not math.isnan(float(v)))
    out = [f"<svg class='spark' width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"]
    if threshold is not None and math.isfinite(threshold):
        out.append(f"<line x1='0' x2='{width}' y1='{y(threshold):.1f}' y2='{y(threshold):.1f}' "
                   f"stroke='{THRESHOLD_COLOR}' stroke-dasharray='3 2'/>")
    out.append(f"<polyline fill='none' stroke='{PALETTE[0]}' stroke-width='1.5' points='{points}'/>")
    if alarm is not None and alarm < n and values[alarm] is not None:
        out.append(f"<circle cx='{x(alarm):.1f}' cy='{y(float(values[alarm])):.1f}' r='3' "  # type: ignore[arg-type]
                   f"fill='{THRESHOLD_COLOR}'/>")
    out.append("</svg>")
    return "".join(out)


def bar_chart(bars: Sequence[tuple[str, float, str]], *, title: str, width: int = 640, height: int = 220) -> str:
    """Horizontal-axis bars of rates in [0, 1]: (label, rate, tooltip)."""
    left, right, top, bottom = 48, 12, 24, 64
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(len(bars), 1)
    slot = plot_w / n
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='plot bars' role='img' width='{width}' "
             f"height='{height}' viewBox='0 0 {width} {height}'><title>{_esc(title)}</title>",
             f"<rect x='{left}' y='{top}' width='{plot_w}' height='{plot_h}' fill='#fafafa' stroke='#ccc'/>"]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        ty = top + plot_h * (1 - tick)
        parts.append(f"<line x1='{left}' x2='{left + plot_w}' y1='{ty:.1f}' y2='{ty:.1f}' stroke='#eee'/>"
                     f"<text x='{left - 6}' y='{ty + 4:.1f}' font-size='11' text-anchor='end'>{tick:g}</text>")
    for i, (label, rate, tip) in enumerate(bars):
        rate = max(0.0, min(1.0, rate))
        bx, bh = left + i * slot + slot * 0.15, plot_h * rate
        short = label if len(label) <= 18 else label[:17] + "…"
        parts.append(f"<rect class='bar' x='{bx:.1f}' y='{top + plot_h - bh:.1f}' width='{slot * 0.7:.1f}' "
                     f"height='{bh:.1f}' fill='{PALETTE[0]}'><title>{_esc(tip)}</title></rect>"
                     f"<text x='{bx + slot * 0.35:.1f}' y='{top + plot_h + 14}' font-size='11' text-anchor='end' "
                     f"transform='rotate(-30 {bx + slot * 0.35:.1f} {top + plot_h + 14})'>{_esc(short)}</text>")
    parts.append("</svg>")
    return "".join(parts)
