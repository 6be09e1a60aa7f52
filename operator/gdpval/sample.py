"""What one sample attempt produced: the record committed last as result.json."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate (a model's JSON reply may carry one) becomes U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", text)


ModelText = Annotated[str, AfterValidator(storable)]


class SampleStatus(StrEnum):
    succeeded = "succeeded"  # the model answered without a tool call
    failed = "failed"  # an error ended the attempt; error_kind says which


class ErrorKind(StrEnum):
    max_steps = "max_steps"
    truncated = "truncated"  # the model's replies kept being cut off by the token limit
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
    budget = "budget"  # the run's budget ran out: the sample runs again once the limit is raised
    sample_budget = "sample_budget"  # the sample's own budget ran out


# How a sample ends when its endpoint is down: if the breaker opened meanwhile, the outage ended it.
OUTAGE_KINDS = frozenset({ErrorKind.connection, ErrorKind.server_error, ErrorKind.timeout, ErrorKind.deadline})


class Usage(BaseModel):
    input_tokens: int = 0  # cached ones included
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def add(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class RefusedFile(BaseModel):
    path: str
    reason: str


class RenamedFile(BaseModel):
    """A deliverable stored under a portable name (the grader may run on another OS)."""

    path: str  # as the model wrote it
    stored_as: str
    reason: str


class SampleResult(BaseModel):
    """Committed last; its presence marks the attempt as finished."""

    sample_id: str
    task_id: str
    repeat: int = 0
    attempt: int = 1
    status: SampleStatus
    error_kind: ErrorKind | None = None
    error: ModelText = ""  # may quote the model or its API
    deliverable_text: ModelText = ""
    deliverable_files: list[str] = Field(default_factory=list)  # relative to deliverable_files/
    refused_files: list[RefusedFile] = Field(default_factory=list)
    renamed_files: list[RenamedFile] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)  # e.g. a reference file the sample ran without
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    api_errors: int = 0  # retried model-API errors (429, 5xx, timeouts)
    rate_limited: int = 0  # model calls answered with a rate limit: the operator narrows its window of pods on them
    finish_reason: str | None = None  # of the last model reply ("length": cut off by the token limit)
    unmetered_turns: int = 0  # model replies whose usage the server left out, wholly or in part: tokens are then a lower bound
    cost: float | None = None  # money spent at the run's prices (budget.prices); None without prices
    continues: int | None = None  # the attempt the run budget cut that this one went on from; its usage and cost are counted here
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def duration_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at)

    @property
    def ready(self) -> bool:
        """The benchmark's submission_ready: the model left final text or a deliverable file, however it ended."""
        return bool(self.deliverable_text.strip() or self.deliverable_files)

    @property
    def completed(self) -> bool:
        """The attempt ended with a final answer (not cut short by an error, max_steps or the deadline)."""
        return self.status == SampleStatus.succeeded


def common_cause(results: list[SampleResult]) -> tuple[int, str] | None:
    """How many failed results share the most common cause, and that cause ("bad_request: <first
    line of the error>"); None when none failed. The line a run that succeeded nowhere ends with."""
    causes: dict[str, int] = {}
    for result in results:
        if not result.completed:
            first = (result.error.strip().splitlines() or [""])[0][:300]
            cause = f"{result.error_kind or 'unknown'}: {first}" if first else str(result.error_kind or "unknown")
            causes[cause] = causes.get(cause, 0) + 1
    return max(((n, cause) for cause, n in causes.items()), default=None)


class SampleCounts(BaseModel):
    """Samples of a run by where they stand: the shape of the CR status, the package info and the live tallies."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    total: int = 0
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0

    @property
    def done(self) -> int:
        return self.succeeded + self.failed


class Tally(SampleCounts):
    """Counts plus what the samples spent so far: the live figures of a run (operator pass, local progress)."""

    input_tokens: int = 0
    output_tokens: int = 0
    api_errors: int = 0

    def counts(self) -> SampleCounts:
        return SampleCounts.model_validate(self.model_dump(include=set(SampleCounts.model_fields)))
