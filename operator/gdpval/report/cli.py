"""The `gdpval report` command's work, kept out of cli.py: flags checked, the report written."""

from __future__ import annotations

from gdpval.errors import GdpvalError
from gdpval.report import Prices, write_report
from gdpval.storage import open_storage


def prices(price_in: float | None, price_out: float | None) -> Prices | None:
    if (price_in is None) != (price_out is None):
        raise GdpvalError("give both --price-in and --price-out (per million tokens), or neither")
    return None if price_in is None or price_out is None else Prices(input=price_in, output=price_out)


def report_command(output: str, run: str, others: list[str], price_in: float | None, price_out: float | None) -> str:
    given = prices(price_in, price_out)
    if run in others:
        raise GdpvalError(f"--compare {run!r} is the run being reported; name another run")
    return write_report(open_storage(output), run, others, given)
