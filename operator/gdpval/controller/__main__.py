"""`python -m gdpval.controller`: the same as `gdpval operator` (tests, debugging)."""

from __future__ import annotations

import typer

from gdpval.controller.effects.entry import operator_command

if __name__ == "__main__":
    typer.run(operator_command)
