"""The agent loop: ask the model, run its tool calls in the sandbox, until it finishes: by a reply
that calls no tool, or (with `prompt.finish` 'submit') by calling `submit`, a plain reply then
earning a one-line nudge.

Every way a model call can fail is classified into an ErrorKind; transient ones (429, 5xx,
timeouts, dropped connections) are retried with backoff inside the sample's deadline, the rest end
the attempt with a recorded reason. Nothing here raises for a model-side problem.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai

from gdpval.agent.governor import CallRefused
from gdpval.agent.prompt import NUDGE
from gdpval.agent.tools import TOOL_ARGUMENT, ParsedCall, applied_timeout, capped, parse_call, render_result, tools_for
from gdpval.agent.transcript import Transcript
from gdpval.sample import ErrorKind, SampleStatus, Usage, storable
from gdpval.settings import AgentSettings, ModelSettings

MAX_API_RETRIES = 8
MAX_BACKOFF_S = 60.0
MAX_REQUEST_TIMEOUT_S = 600.0


class ToolOutputLike(Protocol):
    """Read-only, so a frozen dataclass (the sandbox client's ToolOutput) fits."""

    @property
    def output(self) -> str: ...

    @property
    def exit_code(self) -> int: ...

    @property
    def timed_out(self) -> bool: ...


class ToolBackend(Protocol):
    def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> ToolOutputLike: ...


class LoopFailure(Exception):
    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class LoopOutcome:
    status: SampleStatus = SampleStatus.failed
    error_kind: ErrorKind | None = None
    error: str = ""
    text: str = ""
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    api_errors: int = 0


@dataclass
class Clock:
    """Injected so deadlines and backoff are testable without sleeping."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def classify(exc: Exception) -> tuple[ErrorKind, bool]:
    """(kind, retryable) for an exception raised by the openai client."""
    if isinstance(exc, CallRefused):
        return exc.kind, False
    if isinstance(exc, openai.RateLimitError):
        return ErrorKind.rate_limited, True
    if isinstance(exc, openai.APITimeoutError):
        return ErrorKind.timeout, True
    if isinstance(exc, openai.APIConnectionError):
        return ErrorKind.connection, True
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return ErrorKind.auth, False
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code >= 500:
            return ErrorKind.server_error, True
        if is_context_length(exc):
            return ErrorKind.context_length, False
        return ErrorKind.bad_request, False
    return ErrorKind.internal, False


def is_context_length(exc: openai.APIStatusError) -> bool:
    text = f"{exc.code or ''} {exc.message}".lower()
    return "context_length" in text or "context length" in text or "maximum context" in text


def retry_delay(exc: Exception, retry: int) -> float:
    """Retry-After when the server gives one, else capped exponential backoff with jitter."""
    response = getattr(exc, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    if header:
        try:
            return min(float(header), MAX_BACKOFF_S * 2)
        except ValueError:
            pass
    return min(MAX_BACKOFF_S, 2.0**retry) * (0.5 + random.random() / 2)


class AgentLoop:
    """One attempt's conversation; `run` returns an outcome and never raises for model errors."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: ModelSettings,
        agent: AgentSettings,
        tools: ToolBackend,
        transcript: Transcript,
        deadline: float,
        clock: Clock | None = None,
        finish: str = "answer",
    ):
        self.client = client
        self.model = model
        self.agent = agent
        self.tools = tools
        self.transcript = transcript
        self.deadline = deadline
        self.clock = clock or Clock()
        self.finish = finish
        self.offered_tools = tools_for(finish)
        self.offered = [tool["function"]["name"] for tool in self.offered_tools]
        self.outcome = LoopOutcome()

    def run(self, system: str | None, user: str) -> LoopOutcome:
        """`system` None sends no system message at all."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system is not None else []
        messages.append({"role": "user", "content": user})
        self.transcript.event("start", model=self.model.name, system=system, user=user, finish=self.finish, tools=self.offered)
        try:
            self._converse(messages)
        except LoopFailure as failure:
            self._fail(failure.kind, str(failure))
        self.transcript.event(
            "end",
            status=self.outcome.status.value,
            error_kind=self.outcome.error_kind,
            error=self.outcome.error,
            steps=self.outcome.steps,
            usage=self.outcome.usage.model_dump(),
        )
        return self.outcome

    def _converse(self, messages: list[dict[str, Any]]) -> None:
        while True:
            if self.outcome.steps >= self.agent.max_steps:
                raise LoopFailure(ErrorKind.max_steps, f"no final answer within max_steps={self.agent.max_steps}")
            message = self._complete(messages)
            self.outcome.steps += 1
            calls = message.tool_calls or []
            if not calls and self.finish == "answer":
                self._succeed(message.content or "")
                return
            if not calls:
                messages += [{"role": "assistant", "content": message.content or ""}, {"role": "user", "content": NUDGE}]
                self.transcript.event("nudge", content=NUDGE)
                continue
            messages.append(assistant_message(message))
            for index, call in enumerate(calls):
                parsed = parse_call(call.function.name, call.function.arguments, self.offered)
                if parsed.name == "submit" and not parsed.problem:
                    self.transcript.event(
                        "submit", id=call.id, answer=parsed.argument, repaired_arguments=parsed.repaired, ignored=[later.id for later in calls[index + 1 :]]
                    )
                    self._succeed(parsed.argument)
                    return
                messages.append(self._run_tool(call, parsed))

    def _succeed(self, text: str) -> None:
        self.outcome.status = SampleStatus.succeeded
        self.outcome.text = text

    def _remaining(self) -> float:
        remaining = self.deadline - self.clock.now()
        if remaining <= 0:
            raise LoopFailure(ErrorKind.deadline, "the sample's wall-clock deadline passed")
        return remaining

    def _complete(self, messages: list[dict[str, Any]]):
        for retry in range(MAX_API_RETRIES + 1):
            timeout = min(MAX_REQUEST_TIMEOUT_S, self._remaining())
            try:
                response = self.client.with_options(timeout=timeout, max_retries=0).chat.completions.create(**self._request(messages))
            except openai.OpenAIError as exc:
                self._retry_or_fail(exc, retry)
                continue
            return self._accept(response)
        raise AssertionError("unreachable: the last retry raises")

    def _request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model.name, "messages": messages, "tools": self.offered_tools}
        if self.model.temperature is not None:
            request["temperature"] = self.model.temperature
        if self.model.max_tokens is not None:
            request["max_tokens"] = self.model.max_tokens
        if self.model.extra_body:
            request["extra_body"] = self.model.extra_body
        return request

    def _retry_or_fail(self, exc: Exception, retry: int) -> None:
        kind, retryable = classify(exc)
        detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        self.outcome.api_errors += 1
        self.transcript.event("api_error", error_kind=kind.value, retry=retry, detail=detail[:2000])
        if not retryable or retry >= MAX_API_RETRIES:
            raise LoopFailure(kind, f"model API: {detail[:500]}")
        delay = retry_delay(exc, retry)
        if delay >= self._remaining():
            raise LoopFailure(ErrorKind.deadline, f"the deadline passed while backing off after: {detail[:300]}")
        self.clock.sleep(delay)

    def _accept(self, response):
        usage = response.usage
        if usage is not None:
            self.outcome.usage = self.outcome.usage.add(Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0))
        if not response.choices:
            raise LoopFailure(ErrorKind.bad_request, "the model API returned no choices")
        message = response.choices[0].message
        self.transcript.event(
            "response",
            content=message.content,
            tool_calls=[{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []],
            finish_reason=response.choices[0].finish_reason,
            usage=usage.model_dump() if usage is not None else None,
        )
        return message

    def _run_tool(self, call, parsed: ParsedCall) -> dict[str, Any]:
        content, timeout = (parsed.problem, None) if parsed.problem else self._execute(parsed)
        content = capped(content)
        self.transcript.event(
            "tool_result",
            id=call.id,
            name=parsed.name,
            content=content,
            rejected=bool(parsed.problem),
            repaired_arguments=parsed.repaired,
            timeout_requested=parsed.timeout,
            timeout_applied=timeout,
        )
        return {"role": "tool", "tool_call_id": storable(call.id), "content": storable(content)}

    def _execute(self, parsed: ParsedCall) -> tuple[str, float]:
        """The tool's rendered result and the timeout it ran under."""
        from gdpval.sandbox.client import SandboxError, SandboxUnavailable

        agent = self.agent
        timeout = applied_timeout(parsed.timeout, agent.command_timeout_seconds, agent.max_command_timeout_seconds, self._remaining())
        try:
            result = self.tools.call(parsed.name, {TOOL_ARGUMENT[parsed.name]: parsed.argument, "timeout": timeout}, timeout)
        except SandboxUnavailable as exc:
            raise LoopFailure(ErrorKind.sandbox, f"the sandbox stopped answering: {exc}") from None
        except SandboxError as exc:
            return f"error: the sandbox refused the call: {exc}", timeout
        return render_result(result.output, result.exit_code, result.timed_out, timeout), timeout

    def _fail(self, kind: ErrorKind, message: str) -> None:
        self.outcome.status = SampleStatus.failed
        self.outcome.error_kind = kind
        self.outcome.error = message


def assistant_message(message) -> dict[str, Any]:
    """The assistant turn as plain JSON, with exactly the tool calls the model made (a lone surrogate,
    which no request body can carry, as U+FFFD)."""
    return {
        "role": "assistant",
        "content": storable(message.content or ""),
        "tool_calls": [
            {"id": storable(c.id), "type": "function", "function": {"name": storable(c.function.name), "arguments": storable(c.function.arguments)}}
            for c in message.tool_calls
        ],
    }
