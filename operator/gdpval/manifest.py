"""The run record (run.json) and sample manifest (manifest.jsonl) written before any sample runs.

They carry everything later steps need, so sample pods and the submission builder never go back
to the dataset hub.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from gdpval.dataset.models import DatasetRef, Sample, Task


class Selection(BaseModel):
    limit: int | None = Field(default=None, ge=1)
    task_ids: list[str] = Field(default_factory=list)
    sectors: list[str] = Field(default_factory=list)
    occupations: list[str] = Field(default_factory=list)
    repeats: int = Field(default=1, ge=1)


class ModelSettings(BaseModel):
    """Model endpoint settings; the API key is never stored here."""

    name: str
    base_url: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)


class AgentSettings(BaseModel):
    max_steps: int = Field(default=250, ge=1)
    command_timeout: float = Field(default=180.0, gt=0)
    sample_deadline: float | None = Field(default=None, gt=0)  # wall-clock seconds per attempt
    network: bool = False
    max_deliverable_bytes: int = Field(default=200 * 1024 * 1024, ge=1)
    max_deliverable_files: int = Field(default=200, ge=1)


class RunRecord(BaseModel):
    """runs/<run>/run.json: the resolved spec and pinned dataset revision."""

    run_name: str
    dataset: DatasetRef
    split: str = "train"
    selection: Selection = Field(default_factory=Selection)
    model: ModelSettings
    agent: AgentSettings = Field(default_factory=AgentSettings)
    created_at: float = 0.0
    gdpval_version: str = ""


class ReferenceFile(BaseModel):
    path: str  # as in the dataset row: reference_files/<hash>/<name>
    key: str  # storage key of the mirrored copy (empty when run locally from a folder)
    size: int = 0


class ManifestEntry(BaseModel):
    """One line of manifest.jsonl."""

    sample: Sample
    task: Task
    references: list[ReferenceFile] = Field(default_factory=list)


def dump_manifest(entries: list[ManifestEntry]) -> str:
    return "".join(json.dumps(e.model_dump(mode="json"), ensure_ascii=False) + "\n" for e in entries)


def load_manifest(text: str) -> list[ManifestEntry]:
    return [ManifestEntry.model_validate_json(line) for line in text.splitlines() if line.strip()]
