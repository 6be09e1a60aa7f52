"""Typed rows of the GDPval dataset, shared by both dataset revisions."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# The first revision's columns; the current one adds rubric and gold columns.
BASE_COLUMNS = (
    "task_id",
    "sector",
    "occupation",
    "prompt",
    "reference_files",
    "reference_file_urls",
    "reference_file_hf_uris",
)
RUBRIC_COLUMNS = ("rubric_pretty", "rubric_json")
# Gold answers: read for the judge alone (dataset.gold), never part of a Task, a manifest or a submission.
GOLD_COLUMNS = ("deliverable_files", "deliverable_file_urls", "deliverable_file_hf_uris")
GOLD_REVISION = "the current 13-column revision of openai/gdpval (openai-mirror/gdpval at its newest revision), with deliverable_files"


class Task(BaseModel):
    """One GDPval task, as samples and submissions see it: the gold columns are never part of it (dataset.gold)."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    sector: str
    occupation: str
    prompt: str
    reference_files: list[str] = Field(default_factory=list)
    reference_file_urls: list[str] = Field(default_factory=list)
    reference_file_hf_uris: list[str] = Field(default_factory=list)
    rubric_pretty: str = ""
    rubric_json: str = ""


class Sample(BaseModel):
    """A task paired with a repeat index: the unit that runs in one sandbox."""

    model_config = ConfigDict(frozen=True)

    sample_id: str
    task_id: str
    repeat: int = 0

    @classmethod
    def of(cls, task_id: str, repeat: int) -> Sample:
        return cls(sample_id=sample_id(task_id, repeat), task_id=task_id, repeat=repeat)


_SAFE = re.compile(r"[^a-z0-9-]+")


def sample_id(task_id: str, repeat: int) -> str:
    """Deterministic, DNS-label-safe id (fits pod names and label values)."""
    base = _SAFE.sub("-", task_id.lower()).strip("-")[:48] or "task"
    if base != task_id.lower():
        base = f"{base[:39]}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}"
    return f"{base}-r{repeat}"


class DatasetRef(BaseModel):
    """Where a dataset comes from and which revision of it was used."""

    source: Literal["modelscope", "local", "s3"]
    location: str  # ModelScope repo id, local folder or s3:// prefix
    revision: str  # pinned revision (commit, tag, or a content hash for folders)

    @property
    def key(self) -> str:
        """Folder-safe name for the shared reference mirror: `<dataset>@<revision>`."""
        name = _SAFE.sub("-", self.location.lower().rstrip("/").split("/")[-1] or "dataset").strip("-")
        digest = hashlib.sha256(json.dumps([self.source, self.location]).encode()).hexdigest()[:8]
        return f"{name}-{digest}@{self.revision}"
