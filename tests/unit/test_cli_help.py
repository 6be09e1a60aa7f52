"""`gdpval --help` texts as a new user reads them in an 80-column terminal (in-process, no subprocess)."""

import pytest
from typer.testing import CliRunner

from gdpval.cli import app
from gdpval.settings import flag_specs


def help_of(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    return result.output


def test_run_help_fits_80_columns_and_names_every_flag_whole():
    text = help_of("run")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    words = set(text.replace("/", " ").replace(",", " ").split())
    missing = [name for spec in flag_specs() for name in spec.names[0].split("/") if name not in words]
    assert missing == []


@pytest.mark.parametrize("command", [("report",), ("submission", "build"), ("stage",), ("sample",)])
def test_commands_that_never_resume_do_not_say_run_name_resumes(command):
    assert "resume" not in help_of(*command)


@pytest.mark.parametrize("command", [(), ("judge",), ("status",), ("fake-model",), ("runtime", "build"), ("submission", "build")])
def test_every_help_fits_80_columns_uncut(command):
    text = help_of(*command)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
