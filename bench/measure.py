"""Pure parts of the benchmarks: Prometheus text, counter deltas, quantiles, fairness between runs.

No I/O here, so each figure the benchmarks print can be checked by a unit test
(tests/unit/test_bench_measure.py).
"""

from __future__ import annotations

import bisect
import datetime
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
# Requests the kubelet or the Job controller makes on a real cluster: the benchmark plays them, the operator never does.
NOT_THE_OPERATOR = frozenset({("pods", "status"), ("jobs", "status")})

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
    value: float

    def label(self, key: str) -> str:
        return dict(self.labels).get(key, "")


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], value)


def parse_metrics(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (comments and malformed lines skipped)."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        labels = tuple(sorted((m["key"], _unescape(m["value"])) for m in _LABEL.finditer(match["labels"] or "")))
        out.append(Sample(match["name"], labels, float(match["value"])))
    return out


def series(samples: Iterable[Sample], name: str) -> dict[Labels, float]:
    return {s.labels: s.value for s in samples if s.name == name}


def delta(before: Mapping[Labels, float], after: Mapping[Labels, float]) -> dict[Labels, float]:
    """Counter growth per series; a series absent before started at zero."""
    return {labels: value - before.get(labels, 0.0) for labels, value in after.items() if value - before.get(labels, 0.0) > 0}


def operator_requests(growth: Mapping[Labels, float]) -> dict[Labels, float]:
    """apiserver_request_total growth without the kubelet's and Job controller's part (played by the benchmark)."""
    return {labels: v for labels, v in growth.items() if (dict(labels).get("resource", ""), dict(labels).get("subresource", "")) not in NOT_THE_OPERATOR}


def by_verb(growth: Mapping[Labels, float], per: float = 1.0) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in growth.items():
        verb = dict(labels).get("verb", "")
        out[verb] = out.get(verb, 0.0) + value / per
    return {verb: round(v, 3) for verb, v in sorted(out.items())}


def by_resource(growth: Mapping[Labels, float], verbs: frozenset[str] = WRITE_VERBS) -> dict[str, int]:
    """Counts of the given verbs per `verb resource[/subresource]`, for seeing where writes go."""
    out: dict[str, int] = {}
    for labels, value in growth.items():
        d = dict(labels)
        if d.get("verb") in verbs:
            key = f"{d['verb']} {d.get('resource', '')}" + (f"/{d['subresource']}" if d.get("subresource") else "")
            out[key] = out.get(key, 0) + int(value)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def writes(per_verb: Mapping[str, float]) -> float:
    return round(sum(v for verb, v in per_verb.items() if verb in WRITE_VERBS), 3)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation between closest ranks; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def histogram_quantile(buckets: Mapping[float, float], q: float) -> float | None:
    """The q-quantile (0-1) of a cumulative histogram {upper bound: count}, as Prometheus estimates it:
    linear within the bucket it falls in; the highest finite bound when it falls in +Inf."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] == 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = bound, count
    return lower


def histogram(samples: Iterable[Sample], name: str) -> dict[float, float]:
    """The cumulative buckets of one unlabelled histogram `name` ({le: count})."""
    return {float(s.label("le")): s.value for s in samples if s.name == f"{name}_bucket"}


def progress_spread(finishes: Mapping[str, Sequence[float]], total: int, step: float = 1.0) -> dict[str, float | None]:
    """How evenly runs progress: each run's finished count over the mean of all runs, sampled every `step`
    seconds while every run is under way (from the mean reaching 10% of `total` to the first run done).
    A starved run shows as a low minimum; within 2x of the mean means min >= 0.5 and max <= 2."""
    if not finishes or total <= 0:
        return {"min_ratio": None, "max_ratio": None}
    ordered = {run: sorted(times) for run, times in finishes.items()}
    first_done = min((t[total - 1] for t in ordered.values() if len(t) >= total), default=max(max(t, default=0.0) for t in ordered.values()))
    start = min(min(t, default=0.0) for t in ordered.values())
    ratios = []
    now = start
    while now < first_done:
        counts = [_count_until(times, now) for times in ordered.values()]
        mean = sum(counts) / len(counts)
        if mean >= 0.1 * total:
            ratios += [c / mean for c in counts]
        now += step
    if not ratios:
        return {"min_ratio": None, "max_ratio": None}
    return {"min_ratio": round(min(ratios), 3), "max_ratio": round(max(ratios), 3)}


def _count_until(times: Sequence[float], now: float) -> int:
    return bisect.bisect_right(times, now)


def _timestamp(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


def startup_marks(pod: Mapping[str, Any], first_request: float | None = None) -> dict[str, float]:
    """When a pod reached each step of its start, in seconds after its creation, from its status
    (the kubelet's timestamps have a resolution of one second), and `first_request` (a Unix time)
    last: where a slow start goes."""
    status = pod.get("status") or {}
    created = _timestamp(pod.get("metadata", {}).get("creationTimestamp"))
    conditions = {c.get("type"): c.get("lastTransitionTime") for c in status.get("conditions") or [] if c.get("status") == "True"}
    containers = {c.get("name"): c.get("state") or {} for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])}

    def started(name: str) -> str | None:
        state = containers.get(name, {})
        return (state.get("running") or state.get("terminated") or {}).get("startedAt")

    marks = {
        "scheduled": conditions.get("PodScheduled"),
        "stage_started": started("stage"),
        "stage_finished": (containers.get("stage", {}).get("terminated") or {}).get("finishedAt"),
        "sandbox_started": started("sandbox"),
        "initialized": conditions.get("Initialized"),
        "agent_started": started("agent"),
    }
    out = {}
    for step, value in marks.items():
        when = _timestamp(value)
        if when is not None and created is not None:
            out[step] = when - created
    if first_request is not None and created is not None:
        out["first_model_request"] = round(first_request - created, 3)
    return out
