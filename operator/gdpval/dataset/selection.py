"""Choosing the samples of a run from the dataset's tasks (pure).

Filters are AND-ed and compared without regard to case or surrounding spaces; the dataset's own
order is kept so that `--limit N` means the same N tasks on every machine.
"""

from __future__ import annotations

from collections.abc import Callable

from gdpval.dataset.errors import SelectionError
from gdpval.dataset.models import Sample, Task
from gdpval.settings import SelectionSettings


def _norm(value: str) -> str:
    return value.strip().casefold()


def _check_known(wanted: list[str], known: list[str], label: str, list_valid: bool) -> None:
    """Name every requested value the dataset lacks (and the valid ones, when few enough to read)."""
    valid = {_norm(v) for v in known}
    unknown = [w for w in wanted if _norm(w) not in valid]
    if not unknown:
        return
    message = f"unknown {label}: {', '.join(repr(u) for u in unknown)}"
    if list_valid:
        message += f"; valid {label}s are: {', '.join(sorted(set(known)))}"
    else:
        message += "; check the ids against the dataset"
    raise SelectionError(message)


def _matcher(wanted: list[str], attr: Callable[[Task], str]) -> Callable[[Task], bool]:
    if not wanted:
        return lambda task: True
    keys = {_norm(w) for w in wanted}
    return lambda task: _norm(attr(task)) in keys


def select(tasks: list[Task], selection: SelectionSettings) -> list[Sample]:
    """The samples to run: filtered tasks in dataset order, limited, then repeated."""
    if not tasks:
        raise SelectionError("the dataset has no tasks in this split: check --dataset and the split")
    _check_known(selection.task_ids, [t.task_id for t in tasks], "task id", list_valid=False)
    _check_known(selection.sectors, [t.sector for t in tasks], "sector", list_valid=True)
    _check_known(selection.occupations, [t.occupation for t in tasks], "occupation", list_valid=True)
    filters = (
        _matcher(selection.task_ids, lambda t: t.task_id),
        _matcher(selection.sectors, lambda t: t.sector),
        _matcher(selection.occupations, lambda t: t.occupation),
    )
    chosen = [task for task in tasks if all(keep(task) for keep in filters)]
    if selection.limit is not None:
        chosen = chosen[: selection.limit]
    if not chosen:
        raise SelectionError(f"the selection matches no task ({_describe(selection)}): loosen the filters")
    return [Sample.of(task.task_id, repeat) for task in chosen for repeat in range(selection.repeats)]


def _describe(selection: SelectionSettings) -> str:
    parts = [
        f"{name}={', '.join(values)}"
        for name, values in (
            ("task ids", selection.task_ids),
            ("sectors", selection.sectors),
            ("occupations", selection.occupations),
        )
        if values
    ]
    return "; ".join(parts) or "no filters"
