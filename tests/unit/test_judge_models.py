"""Rubric items in, the judge's reply checked, and sums over maxima per sample, sector and run."""

from __future__ import annotations

import json

import pytest

from gdpval.judge.models import LABEL, JudgeResults, MalformedReply, RubricError, SampleScore, check_reply, parse_rubric
from support import stress


def test_the_stress_rubrics_parse_as_the_current_revision_writes_them():
    for row in stress.stress_rows("current")[:30]:
        raw = json.loads(row["rubric_json"])
        items = parse_rubric(row["rubric_json"])
        assert [i.item_id for i in items] == [r["rubric_item_id"] for r in raw]
        assert [i.points for i in items] == [r["score"] for r in raw]


def test_items_without_or_with_a_repeated_id_get_their_own():
    items = parse_rubric(
        json.dumps(
            [{"criterion": "a", "score": 1}, {"rubric_item_id": "x", "criterion": "b", "score": 2}, {"rubric_item_id": "x", "criterion": "c", "score": 1}]
        )
    )
    assert [i.item_id for i in items] == ["item-0", "x", "x#2"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [("{", "not JSON"), ('{"a": 1}', "JSON list"), ('[{"score": 2}]', "criterion"), ('[{"criterion": "c", "score": -1}]', "non-negative")],
)
def test_unreadable_rubrics_say_what_is_wrong(text, problem):
    with pytest.raises(RubricError, match=problem):
        parse_rubric(text)


ITEMS = parse_rubric(json.dumps([{"rubric_item_id": "a", "criterion": "Totals add up", "score": 3}, {"rubric_item_id": "b", "criterion": "Tone", "score": 1}]))


def reply(*scores: tuple[str, float]) -> str:
    return json.dumps({"scores": [{"item_id": i, "score": s, "reason": "because\nof  this"} for i, s in scores]})


def test_a_valid_reply_is_kept_in_rubric_order_with_one_line_reasons():
    scores = check_reply(reply(("b", 1), ("a", 2.5)), ITEMS)
    assert [(s.item_id, s.score, s.points) for s in scores] == [("a", 2.5, 3), ("b", 1, 1)]
    assert scores[0].reason == "because of this" and scores[0].criterion == "Totals add up"
    fenced = check_reply(f"```json\n{reply(('a', 3), ('b', 0))}\n```", ITEMS)
    assert [s.score for s in fenced] == [3, 0]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"scores": [{"item_id": "a", "sco', "not the JSON"),
        (None, "not the JSON"),
        (reply(("a", 1)), "do not match"),
        (reply(("a", 1), ("b", 1), ("c", 0)), "do not match"),
        (reply(("a", 1), ("a", 2), ("b", 0)), "twice"),
        (reply(("a", 4), ("b", 0)), "outside 0..3"),
        (reply(("a", 1), ("b", -1)), "outside"),
    ],
)
def test_a_malformed_reply_is_refused(text, problem):
    with pytest.raises(MalformedReply, match=problem):
        check_reply(text, ITEMS)


def score(sector: str, status: str, points: float, most: float) -> SampleScore:
    return SampleScore(
        sample_id=f"s{points}{status}", task_id="t", sector=sector, occupation="o", judge_model="j", status=status, points=points, max_points=most
    )  # type: ignore[arg-type]


def test_totals_are_sums_over_maxima_and_leave_judge_failures_out():
    scores = [
        score("A", "scored", 3, 4),
        score("A", "no_deliverable", 0, 6),
        score("B", "scored", 1, 2),
        score("B", "failed", 0, 9),
        score("B", "no_rubric", 0, 0),
    ]
    results = JudgeResults.of("r", "j", "now", scores)
    assert results.label == LABEL and "not the official" in LABEL
    assert (results.overall.points, results.overall.max_points, results.overall.score) == (4, 12, 0.3333)
    assert (results.overall.scored, results.overall.failed, results.overall.no_deliverable, results.overall.no_rubric) == (2, 1, 1, 1)
    assert results.by_sector["A"].score == 0.3 and results.by_sector["B"].score == 0.5
    assert scores[1].fraction == 0.0 and scores[3].fraction is None
