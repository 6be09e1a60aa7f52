"""`gdpval run`'s exit status, as a CI pipeline reads it (README, "Exit status")."""

import pytest

from gdpval import contract
from gdpval.cli import run_exit_status


@pytest.mark.parametrize(
    "total, succeeded, crashed, status",
    [
        (6, 6, 0, 0),
        (6, 0, 0, contract.EXIT_SAMPLES_FAILED),  # every sample failed (the seven-minute outage)
        (6, 5, 0, contract.EXIT_SAMPLES_FAILED),  # one failed or missing
        (6, 5, 1, contract.EXIT_UNFINISHED),  # one crashed: a resume runs it
        (0, 0, 0, 0),  # nothing selected
    ],
)
def test_exit_status(total, succeeded, crashed, status):
    assert run_exit_status(total, succeeded, crashed) == status


def test_a_run_its_budget_stopped_is_unfinished_not_failed():
    assert run_exit_status(6, 2, 0, budget_stopped=True) == contract.EXIT_UNFINISHED


def test_the_statuses_are_distinct_from_bad_input_and_interrupts():
    assert len({0, contract.EXIT_SAMPLES_FAILED, 2, contract.EXIT_UNFINISHED, 130, contract.EXIT_RUN_CONFLICT}) == 6
