"""Errors of dataset loading and sample selection, each worded as what to fix."""

from __future__ import annotations

from gdpval.errors import GdpvalError


class DatasetError(GdpvalError):
    """The dataset cannot be found, fetched or parsed."""


class SelectionError(GdpvalError):
    """The selection names tasks, sectors or occupations the dataset lacks, or matches nothing."""


class MissingReference(DatasetError):
    """A reference file named by a task is absent from the dataset: one sample fails, not the run."""

    def __init__(self, path: str, dataset: str, task_ids: list[str]):
        self.path = path
        self.dataset = dataset
        self.task_ids = task_ids
        tasks = ", ".join(task_ids) or "no task"
        super().__init__(f"reference file {path!r} (task {tasks}) is missing from dataset {dataset}")
