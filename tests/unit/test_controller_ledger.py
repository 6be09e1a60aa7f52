"""The ledger's split between the ConfigMap (in flight) and archive segments in S3 (ended)."""

from __future__ import annotations

from gdpval.controller.pure.ledger import (
    ARCHIVE_BATCH,
    SEGMENTS_KEY,
    Entry,
    Ledger,
    Outcome,
    ResultSummary,
    decode,
    decode_segment,
    encode_cluster,
    encode_segment,
    first_attempt,
    merge,
    segments_of,
    split,
)

LONG_REASON = "agent-OOMKilled-exit137-" + "x" * 64  # cut to 64 characters, the longest a reason gets
OK = ResultSummary(succeeded=True, input_tokens=123_456, output_tokens=65_432, api_errors=3)
BAD = ResultSummary(succeeded=False, reason=LONG_REASON, input_tokens=99_999)


def wire_size(data: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


def test_in_flight_stays_and_ended_entries_move_in_batches():
    running = {f"s{i}": first_attempt() for i in range(3)}
    ended = {f"e{i}": first_attempt().finish(10.0, OK) for i in range(ARCHIVE_BATCH - 1)}
    parts = split(running | ended, {})
    assert parts.archive == {} and parts.cluster == running | ended, "fewer than a batch: all stay in the ConfigMap"
    ended["last"] = first_attempt().finish(10.0, BAD)
    parts = split(running | ended, {})
    assert parts.cluster == running and parts.archive == ended
    assert split(running | ended, ended).archive == {}, "archived entries are not archived again"
    restarted = ended["last"].start(2)
    assert split(running | ended | {"last": restarted}, ended).cluster["last"] == restarted


def test_merge_lets_later_segments_and_the_configmap_override():
    first = {"a": first_attempt().finish(1.0, BAD), "b": first_attempt().finish(1.0, OK)}
    second = {"a": first["a"].start(2).finish(2.0, BAD)}
    cluster = {"a": second["a"].start(3), "c": first_attempt()}
    ledger, archived = merge([first, second], cluster)
    assert ledger == {"a": cluster["a"], "b": first["b"], "c": cluster["c"]}
    assert archived == {"a": second["a"], "b": first["b"]}


def test_configmap_and_segments_round_trip():
    entries = {"t-r0": first_attempt().finish(3.0, BAD), "ü/ 🙂-r1": first_attempt()}
    assert decode_segment(encode_segment(entries)) == entries
    data = encode_cluster({"t-r0": entries["t-r0"]}, 7)
    assert segments_of(data) == 7 and decode(data) == {"t-r0": entries["t-r0"]}
    assert segments_of(encode_cluster({}, 0)) == 0 and SEGMENTS_KEY not in encode_cluster({}, 0)


def _step(ledger: Ledger, in_flight: list[str], now: float, retries: int) -> list[str]:
    """Every in-flight sample ends: one in three fails with the longest reason and is started again while it may."""
    again = []
    for i, sample in enumerate(in_flight):
        entry = ledger[sample].finish(now, BAD if i % 3 == 0 else OK)
        if entry.outcome == Outcome.failed and entry.attempt <= retries:
            entry, _ = entry.start(entry.attempt + 1), again.append(sample)
        ledger[sample] = entry
    return again


def test_configmap_stays_bounded_by_parallelism_for_100000_samples():
    """100,000 samples (uuid-like task ids, repeats) at parallelism 2,000, a third failing and retried twice."""
    parallelism, retries = 2_000, 2
    samples = [f"{i:08x}-1111-2222-3333-444455556666-r{i % 100}" for i in range(100_000)]
    ledger: Ledger = {}
    archived: Ledger = {}
    segments: list[Ledger] = []
    largest = 0
    queue, in_flight, now = iter(samples), [], 0.0
    while True:
        for sample in queue:
            ledger[sample] = first_attempt()
            in_flight.append(sample)
            if len(in_flight) >= parallelism:
                break
        if not in_flight:
            break
        parts = split(ledger, archived)
        if parts.archive:
            segments.append(parts.archive)
            archived = archived | parts.archive
        largest = max(largest, wire_size(encode_cluster(parts.cluster, len(segments))))
        now += 1.0
        in_flight = _step(ledger, in_flight, now, retries)
    parts = split(ledger, archived)
    if parts.archive:
        segments.append(parts.archive)
    assert merge(segments, parts.cluster)[0] == ledger, "segments then the ConfigMap give back the whole ledger"
    longest = max(len(k) + len(Entry(3, Outcome.failed, 3, 10**10, 10**9, 10**9, 10**6, LONG_REASON, 3).encode()) for k in samples)
    assert largest <= (parallelism + ARCHIVE_BATCH) * longest and largest < 256 * 1024, largest
    assert len(segments) <= len(samples) * (1 + retries) // ARCHIVE_BATCH + 1
