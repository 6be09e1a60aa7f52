"""The lines a stopped or failed run ends with: the most common cause, the budget that stopped it."""

from __future__ import annotations

from gdpval.budget import Spend, run_stop_line
from gdpval.sample import ErrorKind, SampleResult, SampleStatus, Usage, common_cause
from gdpval.settings import BudgetSettings


def failed(kind: ErrorKind, error: str) -> SampleResult:
    return SampleResult(sample_id="s", task_id="t", status=SampleStatus.failed, error_kind=kind, error=error)


def test_the_most_common_cause_is_its_kind_and_the_first_line_of_its_error():
    results = [
        failed(ErrorKind.bad_request, "model API: Error code: 400 - unknown parameter\nmore detail"),
        failed(ErrorKind.bad_request, "model API: Error code: 400 - unknown parameter\nother detail"),
        failed(ErrorKind.timeout, "model API: timed out"),
        SampleResult(sample_id="s", task_id="t", status=SampleStatus.succeeded),
    ]
    assert common_cause(results) == (2, "bad_request: model API: Error code: 400 - unknown parameter")
    assert common_cause(results[3:]) is None
    assert common_cause([failed(ErrorKind.internal, "")]) == (1, "internal")


def test_the_stop_line_names_the_run_budget_and_its_figures():
    spent = Spend(Usage(input_tokens=15_000, output_tokens=230))
    assert run_stop_line(BudgetSettings(run_tokens=15_000), spent) == "run budget (15,230 tokens of 15,000)"
    assert run_stop_line(BudgetSettings(run_tokens=20_000), spent) is None
    assert run_stop_line(BudgetSettings(), spent) is None


def test_a_host_run_missing_asked_types_gets_one_line_naming_the_full_runtime():
    from gdpval.cli import host_runtime_hint

    line = host_runtime_hint("host", 11)
    assert line is not None and line.startswith("11 sample(s) lack a file type") and "gdpval runtime build" in line
    assert host_runtime_hint("sha256:abc", 11) is None  # the full runtime: the samples had the libraries
    assert host_runtime_hint("host", 0) is None
