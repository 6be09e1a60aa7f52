"""The run record (run.json) and sample manifest (manifest.jsonl) written before any sample runs.

They carry everything later steps need, so sample pods and the submission builder never go back
to the dataset hub.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field, model_validator

from gdpval.dataset.models import DatasetRef, Sample, Task
from gdpval.settings import RunSettings

FORMAT = 2
_MIB = 1024 * 1024


class RunOwner(BaseModel):
    """The GdpvalRun a cluster run's storage belongs to (local runs have none)."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def parse(cls, text: str) -> RunOwner:
        namespace, name, uid = text.split("/")
        return cls(namespace=namespace, name=name, uid=uid)

    def __str__(self) -> str:
        return f"GdpvalRun {self.namespace}/{self.name} (uid {self.uid})"


class RunRecord(BaseModel):
    """runs/<run>/run.json: the run's settings and the dataset revision it pinned."""

    format: int = FORMAT
    run_name: str
    owner: RunOwner | None = None
    settings: RunSettings
    dataset: DatasetRef
    created_at: float = 0.0
    gdpval_version: str = ""
    # The root local sandboxes run in: "host", or the digest of the sandbox image unpacked as their root
    # (gdpval.sandbox.runtime). None for cluster runs (pods run spec.images.sandbox) and older run.json.
    runtime: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Read run.json as 0.1.0 wrote it (settings spread over top-level sections)."""
        if isinstance(data, dict) and "settings" not in data and "agent" in data:
            return upgrade_0_1(data)
        return data

    def dump(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False)


def upgrade_0_1(old: dict[str, Any]) -> dict[str, Any]:
    agent, dataset = old.get("agent") or {}, old.get("dataset") or {}
    settings = {
        "model": {k: v for k, v in (old.get("model") or {}).items() if v not in (None, {})},
        "dataset": {"id": dataset.get("location"), "split": old.get("split", "train")},
        "selection": old.get("selection") or {},
        "agent": {
            "max_steps": agent.get("max_steps", 250),
            "command_timeout_seconds": int(agent.get("command_timeout", 180)),
            "sample_deadline_seconds": agent.get("sample_deadline") and int(agent["sample_deadline"]),
        },
        "sandbox": {"network": agent.get("network", False)},
        "deliverables": {
            "max_file_mib": max(1, agent.get("max_deliverable_bytes", 200 * _MIB) // _MIB),
            "max_files": agent.get("max_deliverable_files", 200),
        },
    }
    keep = ("run_name", "dataset", "created_at", "gdpval_version")
    return {"format": FORMAT, **{k: old[k] for k in keep if k in old}, "settings": settings}


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
    """Split on newlines only: str.splitlines() would also cut at U+2028 and friends inside a prompt."""
    return [ManifestEntry.model_validate_json(line) for line in text.split("\n") if line.strip()]
