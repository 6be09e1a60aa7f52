"""The benchmarks' pure figures: Prometheus text, counter deltas, quantiles, progress spread."""

from __future__ import annotations

import math
import sys

import pytest

from infra.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))

from bench import measure  # noqa: E402

from gdpval.controller.effects.metrics import Metrics  # noqa: E402

APISERVER = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 20
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="PUT",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
etcd_request_duration_seconds_sum{operation="get",type="a \\"quoted\\" \\\\ name"} 1.5e-3
"""


def test_parse_metrics_reads_labels_values_and_escapes():
    samples = measure.parse_metrics(APISERVER)
    assert len(samples) == 5
    assert samples[0].label("verb") == "POST" and samples[0].value == 10
    assert samples[-1].label("type") == 'a "quoted" \\ name' and samples[-1].value == pytest.approx(0.0015)


def test_requests_per_sample_leave_out_the_played_kubelet():
    before = measure.series(measure.parse_metrics(APISERVER), "apiserver_request_total")
    after_text = APISERVER.replace("} 10\n", "} 30\n").replace("} 20\n", "} 60\n").replace("} 4\n", "} 9\n")
    growth = measure.delta(before, measure.series(measure.parse_metrics(after_text), "apiserver_request_total"))
    assert sorted(measure.by_verb(growth).items()) == [("PATCH", 40.0), ("POST", 20.0), ("PUT", 5.0)]
    ours = measure.by_verb(measure.operator_requests(growth), per=10)
    assert ours == {"POST": 2.0, "PUT": 0.5}
    assert measure.writes(ours) == 2.5
    assert measure.by_resource(measure.operator_requests(growth)) == {"POST pods": 20, "PUT configmaps": 5}


def test_percentile_interpolates_between_ranks():
    assert measure.percentile([], 50) is None
    assert measure.percentile([3.0], 99) == 3.0
    assert measure.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert measure.percentile(list(range(101)), 99) == 99
    assert measure.percentile([5, 1, 3], 100) == 5


def test_histogram_quantile_of_the_operators_own_histogram():
    """Read back through the operator's own exposition, so a change of its bucket format shows here."""
    metrics = Metrics()
    for seconds in [0.02] * 50 + [0.3] * 49 + [3.0]:
        metrics.observe_reconcile(seconds)
    buckets = measure.histogram(measure.parse_metrics(metrics.render()), "gdpval_reconcile_duration_seconds")
    assert buckets[math.inf] == 100 and buckets[0.05] == 50
    assert measure.histogram_quantile(buckets, 0.5) == pytest.approx(0.05)
    assert 0.25 < measure.histogram_quantile(buckets, 0.99) <= 0.5
    assert measure.histogram_quantile(buckets, 1.0) == pytest.approx(5.0)
    assert measure.histogram_quantile({1.0: 0, math.inf: 0}, 0.5) is None
    assert measure.histogram_quantile({1.0: 1, math.inf: 4}, 0.9) == 1.0


def test_progress_spread_flags_a_starved_run():
    even = {"a": [float(t) for t in range(10)], "b": [t + 0.5 for t in range(10)]}
    spread = measure.progress_spread(even, total=10)
    assert spread["min_ratio"] >= 0.5 and spread["max_ratio"] <= 2
    starved = {"a": [float(t) for t in range(10)], "b": [float(t) for t in range(10)], "c": [9.0]}
    assert measure.progress_spread(starved, total=10)["min_ratio"] < 0.5
    assert measure.progress_spread({}, total=10) == {"min_ratio": None, "max_ratio": None}


def test_startup_marks_from_a_pod_status():
    pod = {
        "metadata": {"creationTimestamp": "2026-12-01T03:50:00Z"},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T03:50:00Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-01T03:50:09Z"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-01T03:50:20Z"},
            ],
            "initContainerStatuses": [
                {"name": "stage", "state": {"terminated": {"startedAt": "2026-12-01T03:50:02Z", "finishedAt": "2026-12-01T03:50:06Z"}}},
                {"name": "sandbox", "state": {"running": {"startedAt": "2026-12-01T03:50:07Z"}}},
            ],
            "containerStatuses": [{"name": "agent", "state": {"waiting": {"reason": "PodInitializing"}}}],
        },
    }
    marks = measure.startup_marks(pod)
    assert marks == {"scheduled": 0, "stage_started": 2, "stage_finished": 6, "sandbox_started": 7, "initialized": 9}
    assert measure.startup_marks(pod, first_request=1796097012.5)["first_model_request"] == 12.5
    assert measure.startup_marks({"metadata": {}, "status": None}) == {}
