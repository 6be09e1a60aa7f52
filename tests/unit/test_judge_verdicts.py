"""Pairwise verdicts, totals, the bootstrap interval and repeat consistency: pure functions over typed scores."""

from __future__ import annotations

import pytest

from gdpval.fakemodel.judge import check_preference, pairwise_choice
from gdpval.judge import wire
from gdpval.judge.verdicts import UNRELIABLE, Consistency, PairResults, PairScore, PairTotals, Usage, best_of_n, bootstrap, combine, headline, preference


def score(task: str, verdict: str, repeat: int = 0, sector: str = "S", **extra) -> PairScore:
    return PairScore(
        sample_id=f"{task}-r{repeat}",
        task_id=task,
        sector=sector,
        occupation="O",
        repeat=repeat,
        against="gold",
        judge_model="j",
        verdict=verdict,
        **extra,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("ours", "ours", ("win", False)),
        ("theirs", "theirs", ("loss", False)),
        ("tie", "tie", ("tie", False)),
        ("ours", "theirs", ("tie", True)),
        ("ours", "tie", ("tie", True)),
    ],
)
def test_a_verdict_counts_only_when_both_orders_agree(first, second, expected):
    assert combine(first, second) == expected


def test_a_letter_means_the_set_shown_in_that_position():
    assert [preference(c, "ours-first") for c in ("A", "B", "tie")] == ["ours", "theirs", "tie"]
    assert [preference(c, "theirs-first") for c in ("A", "B", "tie")] == ["theirs", "ours", "tie"]


def test_totals_leave_failed_pairs_out_and_count_them():
    scores = [score("a", "win"), score("b", "loss"), score("c", "tie", inconsistent=True), score("d", "failed"), score("e", "loss", no_deliverable=True)]
    results = PairResults.of("run", "gold", "j", "now", scores)
    overall = results.overall
    assert (overall.wins, overall.ties, overall.losses, overall.inconsistent, overall.failed, overall.no_deliverable) == (1, 1, 2, 1, 1, 1)
    assert overall.wins_or_ties == 0.5 and overall.samples == 5


def test_the_bootstrap_is_seeded_keeps_repeats_together_and_narrows():
    few = [score(str(t), "win" if t % 2 else "loss") for t in range(6)]
    many = [score(str(t), "win" if t % 2 else "loss") for t in range(60)]
    assert bootstrap(few, seed=3) == bootstrap(few, seed=3)
    small, large = bootstrap(few), bootstrap(many)
    assert small is not None and large is not None and large.high - large.low < small.high - small.low
    together = [score(str(t), "win" if t % 2 else "loss", repeat=r) for t in range(6) for r in range(5)]
    tied = bootstrap(together)
    assert tied is not None and tied.high - tied.low >= small.high - small.low - 0.05  # repeats add no independent evidence
    assert bootstrap([score("a", "failed")]) is None


def test_consistency_counts_flips_and_wins_in_k_of_n():
    scores = [score("a", v, r) for r, v in enumerate(["win", "loss", "win"])] + [score("b", "win", r) for r in range(3)] + [score("c", "tie")]
    consistency = Consistency.of(scores)
    assert consistency.tasks == 2 and consistency.flip_rate == 0.5 and consistency.wins_k_of_n == {"2/3": 1, "3/3": 1}
    assert {t: b.repeat for t, b in best_of_n(scores).items()} == {"a": 0, "b": 0, "c": 0}
    assert best_of_n([score("x", "loss", 0), score("x", "tie", 1), score("x", "win", 2)])["x"].repeat == 2


def test_usage_adds_up_and_keeps_cost_unknown_without_prices():
    assert (Usage(calls=1, prompt_tokens=5) + Usage(cached_calls=1)).cost is None
    assert (Usage(calls=1, cost=0.5) + Usage(calls=2, cost=0.25)).model_dump() == Usage(calls=3, cost=0.75).model_dump()


def test_the_scripted_pairwise_judge_reads_the_two_sets():
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": t} for t in ("# Task", f"{wire.SET_HEADER}A", "x GOLD", f"{wire.SET_HEADER}B", "y", wire.SETS_END)],
        }
    ]
    sets = wire.sets_of(messages)
    assert sets == {"A": "x GOLD", "B": "y"}
    assert [pairwise_choice(p, sets) for p in ("first", "second", "text:GOLD", "not-text:GOLD", "text:nowhere")] == ["A", "B", "A", "B", "tie"]
    assert pairwise_choice("content", sets) == pairwise_choice("content", {"A": "y", "B": "x GOLD"}).translate(str.maketrans("AB", "BA"))
    with pytest.raises(ValueError, match="judge preference"):
        check_preference("text:")


def test_reliability_is_labelled_over_the_limit_only():
    base = dict(task_id="t", sector="s", occupation="o", against="gold", judge_model="j")
    tied = [PairScore(sample_id=f"i{i}", verdict="tie", inconsistent=True, **base) for i in range(3)]
    won = [PairScore(sample_id=f"w{i}", verdict="win", **base) for i in range(7)]
    assert PairTotals.of(tied + won).reliability == "" and PairTotals.of(tied + won).inconsistent_rate == 0.3  # at the limit: not over
    over = PairTotals.of(tied + won[:6])
    assert over.reliability == UNRELIABLE and UNRELIABLE in headline(over) and "orders disagreed on 33.3%" in headline(over)
    assert PairTotals.of(tied + won, max_inconsistent=0.2).reliability == UNRELIABLE
    nothing = PairTotals.of([PairScore(sample_id="f", verdict="failed", **base)])
    assert (nothing.inconsistent_rate, nothing.failed_rate, nothing.reliability) == (None, 1.0, "")
