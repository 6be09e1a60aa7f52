"""Leader election's rules (client-go's), without an API server; tests/cluster runs two replicas on a real one."""

from __future__ import annotations

import pytest

from gdpval.controller.effects.leader import LeaseRecord, Seen, Step, Timing, claimed, lost, next_step, observe

T = Timing()


def test_a_missing_or_free_lease_is_taken_and_our_own_renewed():
    assert next_step(observe(None, None, 0.0), "a", 0.0) == Step.create
    assert next_step(observe(None, LeaseRecord(holder=""), 0.0), "a", 0.0) == Step.take
    assert next_step(observe(None, LeaseRecord(holder="a", renewed="t1"), 0.0), "a", 0.0) == Step.renew


def test_another_holder_is_waited_out_by_our_own_clock():
    """The holder's renewTime is only compared for change: its clock may be off, ours measures."""
    held = LeaseRecord(holder="b", duration=15, renewed="2999-01-01T00:00:00.000000Z")
    seen = observe(None, held, 100.0)
    assert next_step(seen, "a", 100.0) == Step.wait
    seen = observe(seen, held, 114.9)
    assert seen == Seen(held, 100.0) and next_step(seen, "a", 114.9) == Step.wait
    assert next_step(observe(seen, held, 115.0), "a", 115.0) == Step.take


def test_a_renewal_restarts_the_expiry_clock():
    seen = observe(None, LeaseRecord(holder="b", renewed="t1"), 100.0)
    seen = observe(seen, LeaseRecord(holder="b", renewed="t2"), 110.0)
    assert next_step(seen, "a", 120.0) == Step.wait and next_step(seen, "a", 125.0) == Step.take


def test_the_leader_stops_before_anyone_may_take_over():
    assert not lost(100.0, 109.9, T) and lost(100.0, 110.0, T)
    assert T.renew_deadline < T.duration, "a leader that cannot renew stops acting before the Lease expires for others"
    with pytest.raises(ValueError, match="renew deadline"):
        Timing(duration=10, renew_deadline=10, retry=2)


def test_a_take_counts_a_transition_and_keeps_the_version_to_write_against():
    record = LeaseRecord(holder="b", transitions=3, version="42")
    taken = claimed(record, "a", Step.take, T)
    assert (taken.holder, taken.transitions, taken.version, taken.duration) == ("a", 4, "42", 15)
    assert claimed(taken, "a", Step.renew, T).transitions == 4
