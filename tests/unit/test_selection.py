"""select(): AND-ed filters in dataset order, limit after filters, repeats, and named errors."""

from __future__ import annotations

import pytest

from gdpval.dataset.errors import SelectionError
from gdpval.dataset.models import Sample
from gdpval.dataset.selection import select
from gdpval.settings import SelectionSettings as Selection
from support.runs import task

TASKS = [
    task("t1", sector="Information", occupation="Editors"),
    task("t2", sector="Government", occupation="Clerks"),
    task("t3", sector="Information", occupation="Film and Video Editors"),
    task("t4", sector="Information", occupation="Editors"),
]


def ids(samples: list[Sample]) -> list[str]:
    return [s.sample_id for s in samples]


def test_everything_in_dataset_order_by_default():
    assert ids(select(TASKS, Selection())) == ["t1-r0", "t2-r0", "t3-r0", "t4-r0"]


def test_filters_are_anded_and_case_insensitive():
    chosen = select(TASKS, Selection(sectors=["information"], occupations=[" EDITORS "]))
    assert ids(chosen) == ["t1-r0", "t4-r0"]


def test_task_ids_keep_dataset_order_not_request_order():
    assert ids(select(TASKS, Selection(task_ids=["t4", "t1"]))) == ["t1-r0", "t4-r0"]


def test_limit_applies_after_filters():
    assert ids(select(TASKS, Selection(sectors=["Information"], limit=2))) == ["t1-r0", "t3-r0"]


def test_repeats_expand_each_task_with_deterministic_ids():
    chosen = select(TASKS, Selection(limit=2, repeats=3))
    assert chosen == [Sample.of(t, r) for t in ("t1", "t2") for r in range(3)]
    assert ids(chosen) == ["t1-r0", "t1-r1", "t1-r2", "t2-r0", "t2-r1", "t2-r2"]
    assert select(TASKS, Selection(limit=2, repeats=3)) == chosen


def test_unknown_task_ids_are_named():
    with pytest.raises(SelectionError, match="unknown task id: 'nope', 'zzz'"):
        select(TASKS, Selection(task_ids=["t1", "nope", "zzz"]))


@pytest.mark.parametrize(
    "selection, valid",
    [
        (Selection(sectors=["Retail"]), "valid sectors are: Government, Information"),
        (Selection(occupations=["Pilots"]), "valid occupations are: Clerks, Editors, Film and Video Editors"),
    ],
)
def test_unknown_sectors_and_occupations_list_the_valid_ones(selection, valid):
    with pytest.raises(SelectionError, match=valid):
        select(TASKS, selection)


def test_filters_that_match_nothing_are_an_error():
    with pytest.raises(SelectionError, match="matches no task.*sectors=Government; occupations=Editors"):
        select(TASKS, Selection(sectors=["Government"], occupations=["Editors"]))


def test_empty_dataset_is_an_error():
    with pytest.raises(SelectionError, match="no tasks"):
        select([], Selection())
