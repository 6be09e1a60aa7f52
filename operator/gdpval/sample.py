"""What one sample attempt produced: the record committed last as result.json."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class SampleStatus(StrEnum):
    succeeded = "succeeded"  # the model answered without a tool call
    failed = "failed"  # an error ended the attempt; error_kind says which


class ErrorKind(StrEnum):
    max_steps = "max_steps"
    deadline = "deadline"
    context_length = "context_length"
    rate_limited = "rate_limited"
    server_error = "server_error"
    timeout = "timeout"
    auth = "auth"
    bad_request = "bad_request"
    connection = "connection"
    sandbox = "sandbox"
    missing_reference = "missing_reference"
    internal = "internal"


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: "Usage") -> "Usage":
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class RefusedFile(BaseModel):
    path: str
    reason: str


class SampleResult(BaseModel):
    """Committed last; its presence marks the attempt as finished."""

    sample_id: str
    task_id: str
    repeat: int = 0
    attempt: int = 1
    status: SampleStatus
    error_kind: ErrorKind | None = None
    error: str = ""
    deliverable_text: str = ""
    deliverable_files: list[str] = Field(default_factory=list)  # relative to deliverable_files/
    refused_files: list[RefusedFile] = Field(default_factory=list)
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    api_errors: int = 0  # retried model-API errors (429, 5xx, timeouts)
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def duration_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at)
