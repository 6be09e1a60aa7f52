"""The metrics exposition."""

from __future__ import annotations

import pytest

from gdpval.controller.effects.metrics import MAX_REASONS, Metrics
from gdpval.controller.types import Tally


def test_render_runs_and_latency():
    m = Metrics()
    m.observe_run("ns", 'r"1', "Running", Tally(total=3, running=1, succeeded=2, input_tokens=10, output_tokens=4, api_errors=1))
    m.observe_reconcile(0.2)
    m.observe_reconcile(40.0, failed=True)
    text = m.render()
    assert 'gdpval_samples{namespace="ns",run="r\\"1",state="succeeded"} 2' in text
    assert 'gdpval_tokens{namespace="ns",run="r\\"1",direction="input"} 10' in text
    assert 'gdpval_model_api_errors{namespace="ns",run="r\\"1"} 1' in text
    assert 'gdpval_reconcile_duration_seconds_bucket{le="0.25"} 1' in text and 'le="+Inf"} 2' in text
    assert "gdpval_reconcile_errors_total 1" in text
    m.forget_run("ns", 'r"1')
    assert "gdpval_samples{" not in m.render()


def test_a_run_with_prices_exports_its_cost_and_an_outage_hold():
    m = Metrics()
    m.observe_run("ns", "priced", "Running", Tally(total=3), cost=1.5, held=True)
    m.observe_run("ns", "free", "Running", Tally(total=3))
    text = m.render()
    assert 'gdpval_cost{namespace="ns",run="priced"} 1.500000' in text and 'gdpval_cost{namespace="ns",run="free"}' not in text
    assert 'gdpval_model_unavailable{namespace="ns",run="priced"} 1' in text and 'gdpval_model_unavailable{namespace="ns",run="free"} 0' in text


def test_a_pass_and_its_wait_for_a_slot_are_separate_histograms():
    m = Metrics()
    m.observe_reconcile(0.3, waited=12.0)
    text = m.render()
    assert 'gdpval_reconcile_duration_seconds_bucket{le="0.25"} 0' in text and 'gdpval_reconcile_duration_seconds_bucket{le="0.5"} 1' in text
    assert 'gdpval_reconcile_wait_seconds_bucket{le="10.0"} 0' in text and 'gdpval_reconcile_wait_seconds_bucket{le="30.0"} 1' in text
    assert "gdpval_reconcile_wait_seconds_sum 12.000000" in text


def test_each_step_of_a_pass_is_a_series_of_one_histogram():
    m = Metrics()
    with m.phase("apply"):
        pass
    with pytest.raises(RuntimeError), m.phase("gather"):
        raise RuntimeError("a failed step is timed too")
    text = m.render()
    assert 'gdpval_reconcile_phase_seconds_bucket{phase="apply",le="0.01"} 1' in text
    assert 'gdpval_reconcile_phase_seconds_count{phase="gather"} 1' in text and text.count("# TYPE gdpval_reconcile_phase_seconds histogram") == 1


def test_failure_reasons_are_exported_bounded_and_kept_after_the_run_finished():
    m = Metrics()
    reasons = {f"agent-Error-exit{i}": 100 - i for i in range(25)} | {"": 1}
    m.observe_run("ns", "r", "Running", Tally(total=3000, failed=sum(reasons.values()), failure_reasons=reasons))
    lines = [line for line in m.render().splitlines() if line.startswith("gdpval_samples_failed_by_reason{")]
    assert len(lines) == MAX_REASONS and 'gdpval_samples_failed_by_reason{namespace="ns",run="r",reason="agent-Error-exit0"} 100' in lines
    assert lines[-1] == f'gdpval_samples_failed_by_reason{{namespace="ns",run="r",reason="other"}} {sum(sorted(reasons.values())[:7])}'
    m.observe_run("ns", "r", "Failed", Tally(total=3000, failed=sum(reasons.values())))
    assert 'reason="agent-Error-exit0"} 100' in m.render(), "a finished run (read from its status) keeps its reasons"
