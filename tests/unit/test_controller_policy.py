"""Retry, backoff, failure budget and cleanup rules, one by one, at their edges."""

from __future__ import annotations

import pytest

from gdpval.api.v1alpha1 import GdpvalRunSpec
from gdpval.controller.pure import policy
from gdpval.controller.pure.ledger import Entry, Outcome
from gdpval.controller.pure.observe import JobView


def spec(**kw) -> GdpvalRunSpec:
    return GdpvalRunSpec.model_validate({"model": {"name": "m"}, "output": {"url": "s3://bucket/p"}, **kw})


@pytest.mark.parametrize(
    ("budget", "total", "allowed"),
    [
        ("10%", 12, 1),  # rounded down
        ("10%", 9, 0),
        ("33%", 10, 3),
        ("0%", 100, 0),
        ("100%", 7, 7),
        ("100%", 0, 0),
        (" 50% ", 5, 2),
        (3, 10, 3),
        (0, 10, 0),
        ("4", 10, 4),
    ],
)
def test_budget_allowed(budget, total, allowed):
    assert policy.budget_allowed(budget, total) == allowed


def test_attempts_are_one_plus_retries():
    assert policy.max_attempts(spec(samples={"retries": 0})) == 1
    assert policy.max_attempts(spec(samples={"retries": 3})) == 4


def test_backoff_doubles_per_attempt_up_to_the_cap():
    s = spec(samples={"backoffSeconds": 10, "maxBackoffSeconds": 35})
    assert [policy.backoff(s, a) for a in (0, 1, 2, 3, 4, 20)] == [10.0, 10.0, 20.0, 35.0, 35.0, 35.0]
    assert policy.backoff(spec(samples={"backoffSeconds": 0}), 5) == 0.0
    assert policy.backoff(spec(samples={"backoffSeconds": 30, "maxBackoffSeconds": 0}), 1) == 0.0


def test_retry_waits_for_the_backoff_after_the_attempt_ended():
    s = spec(samples={"retries": 2, "backoffSeconds": 10})
    assert policy.retry_at(s, Entry(1, Outcome.failed, ended=1000)) == 1010.0
    assert policy.retry_at(s, Entry(2, Outcome.lost, ended=1000)) == 1020.0
    assert policy.retry_at(s, Entry(3, Outcome.lost, ended=1000)) is None  # no retry left


@pytest.mark.parametrize("outcome", [Outcome.running, Outcome.succeeded])
def test_no_retry_for_an_attempt_in_flight_or_succeeded(outcome):
    entry = Entry(1, outcome, ended=1000)
    assert policy.retry_at(spec(), entry) is None and not policy.gave_up(spec(), entry)


def test_gave_up_only_after_the_last_attempt_ended_badly():
    no_retries = spec(samples={"retries": 0})
    assert policy.gave_up(no_retries, Entry(1, Outcome.failed)) and policy.gave_up(no_retries, Entry(1, Outcome.lost))
    one_retry = spec(samples={"retries": 1})
    assert not policy.gave_up(one_retry, Entry(1, Outcome.failed))
    assert policy.gave_up(one_retry, Entry(2, Outcome.lost)) and not policy.gave_up(one_retry, Entry(2, Outcome.succeeded))


def test_refused_pod_create_is_retried_after_the_delay():
    assert policy.create_retry_at(None, 500.0) is None
    refused = (500.0, "exceeded quota")
    assert policy.create_retry_at(refused, 500.0) == 500.0 + policy.CREATE_RETRY_SECONDS
    assert policy.create_retry_at(refused, 500.0 + policy.CREATE_RETRY_SECONDS - 1) == 500.0 + policy.CREATE_RETRY_SECONDS
    assert policy.create_retry_at(refused, 500.0 + policy.CREATE_RETRY_SECONDS) is None


def test_refused_job_create_blocks_for_a_while():
    assert policy.job_error_current(100.0, 100.0 + policy.JOB_ERROR_SECONDS - 1)
    assert not policy.job_error_current(100.0, 100.0 + policy.JOB_ERROR_SECONDS)


def test_failed_passes_back_off_to_a_cap_and_are_reported_from_the_third():
    assert [policy.error_backoff(e) for e in (1, 2, 5, 6, 50)] == [2.0, 4.0, 32.0, 60.0, 60.0]
    assert [policy.report_errors(e) for e in (0, 1, 2, 3, 10)] == [False, False, False, True, True]


@pytest.mark.parametrize(
    ("cleanup", "kept"),
    [
        ("Delete", set()),
        ("KeepFailed", {Outcome.failed, Outcome.lost}),
        ("Keep", {Outcome.succeeded, Outcome.failed, Outcome.lost}),
    ],
)
def test_pods_kept_by_cleanup_policy(cleanup, kept):
    s = spec(cleanupPolicy=cleanup)
    assert {o for o in (Outcome.succeeded, Outcome.failed, Outcome.lost) if policy.keep_pod(s, o)} == kept


def job(state: str) -> JobView:
    return JobView(f"run-{state}", "prepare", int(state == "active"), state == "complete", state == "failed", "", 0.0)


@pytest.mark.parametrize(
    ("cleanup", "kept"),
    [
        ("Delete", {"active"}),
        ("KeepFailed", {"active", "failed"}),
        ("Keep", {"active", "failed", "complete"}),
    ],
)
def test_jobs_kept_by_cleanup_policy_and_while_they_run(cleanup, kept):
    s = spec(cleanupPolicy=cleanup)
    assert {state for state in ("active", "complete", "failed") if policy.keep_job(s, job(state))} == kept


@pytest.mark.parametrize(
    "window, ceiling, limited, clean, expected",
    [
        (8, 8, 1, 3, 6),  # rate limits cut by a quarter, whatever else ended
        (1, 8, 2, 0, 1),  # never below one pod
        (6, 8, 0, 1, 7),  # each attempt that met none adds one
        (7, 8, 0, 5, 8),  # up to spec.parallelism
        (8, 4, 0, 0, 4),  # a lowered parallelism lowers the window at once
        (3, 8, 0, 0, 3),  # nothing ended: nothing changes
    ],
)
def test_the_window_of_pods_is_aimd_within_parallelism(window, ceiling, limited, clean, expected):
    assert policy.next_window(window, ceiling, limited, clean) == expected
