"""The report's HTML pieces shared by its sections: escaping, percentages, tables."""

from __future__ import annotations

from collections.abc import Collection
from html import escape

from gdpval.sample import storable


def e(value: object) -> str:
    """Escaped text: any Unicode in, a lone surrogate as U+FFFD."""
    return escape(storable(str(value)), quote=True)


def pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def table(head: list[str], rows: list[list[str]], numeric: Collection[int] = ()) -> str:
    """Cells are HTML already (escape before); columns in `numeric` align right."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"
