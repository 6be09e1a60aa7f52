"""Inline SVG bar charts, drawn here so the report needs no script and no download to show its plots.

Every bar is a `<rect class="mark">` (a browser test counts them); labels are escaped text.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

ROW, LABEL_W, BAR_W, VALUE_W = 22, 260, 360, 90
COLOURS = ("#2f6db5", "#d9822b")


def _label(text: str, limit: int = 38) -> str:
    return escape(text if len(text) <= limit else text[: limit - 1] + "\u2026")


def bars(title: str, items: list[tuple[str, float]], fmt: Callable[[float], str], top: float | None = None) -> str:
    """One horizontal bar per item, scaled to `top` (default: the largest value)."""
    return grouped(title, [(label, (value,)) for label, value in items], fmt, (), top)


def grouped(title: str, items: list[tuple[str, tuple[float, ...]]], fmt: Callable[[float], str], legend: tuple[str, ...], top: float | None = None) -> str:
    """Bars in groups of one per series (e.g. this run and the run it is compared with)."""
    series = max((len(values) for _, values in items), default=1)
    scale = top or max((v for _, values in items for v in values), default=0.0) or 1.0
    band = ROW * series + 6
    legend_h = ROW if legend else 0
    height = legend_h + band * len(items) + 4
    parts = [
        f'<svg class="chart" role="img" xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + BAR_W + VALUE_W}" height="{height}" '
        f'viewBox="0 0 {LABEL_W + BAR_W + VALUE_W} {height}"><title>{escape(title)}</title>'
    ]
    for i, name in enumerate(legend):
        x = LABEL_W + i * 160
        parts.append(f'<rect x="{x}" y="4" width="12" height="12" fill="{COLOURS[i % 2]}"/><text x="{x + 16}" y="15">{_label(name, 22)}</text>')
    for row, (label, values) in enumerate(items):
        y0 = legend_h + row * band
        parts.append(f'<text x="{LABEL_W - 6}" y="{y0 + ROW * series / 2 + 5:.0f}" text-anchor="end"><title>{escape(label)}</title>{_label(label)}</text>')
        for i, value in enumerate(values):
            y = y0 + i * ROW + 3
            width = max(0.0, min(1.0, value / scale)) * BAR_W
            parts.append(
                f'<rect class="mark" x="{LABEL_W}" y="{y}" width="{width:.1f}" height="{ROW - 6}" fill="{COLOURS[i % 2]}">'
                f"<title>{escape(label)}: {escape(fmt(value))}</title></rect>"
                f'<text x="{LABEL_W + width + 4:.1f}" y="{y + ROW - 9}">{escape(fmt(value))}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
