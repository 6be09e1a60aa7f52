"""The agent loop: ask the model, run its tool calls in the sandbox, until it finishes: by a reply
that calls no tool, or (with `prompt.finish` 'submit') by calling `submit`, a plain reply then
earning a one-line nudge. A reply cut off by the token limit (finish_reason `length`) is never a
final answer: the model is told and carries on, and after MAX_CUT_OFFS such replies in a row the
attempt ends as `truncated`.

Every way a model call can fail is classified into an ErrorKind; transient ones (429, 5xx,
timeouts, dropped connections) are retried with backoff inside the sample's deadline, the rest end
the attempt with a recorded reason. Nothing here raises for a model-side problem.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai

from gdpval.agent.context import elide_old_output
from gdpval.agent.governor import CallRefused
from gdpval.agent.images import Viewer, images_message
from gdpval.agent.prompt import CUT_OFF, NUDGE
from gdpval.agent.reply import LENGTH, ModelReply, ToolCall, assemble_stream, parse_completion, tokens
from gdpval.agent.tools import TOOL_ARGUMENT, VIEW, ParsedCall, applied_timeout, capped, parse_call, render_result, tools_for
from gdpval.agent.transcript import Transcript
from gdpval.sample import ErrorKind, SampleStatus, Usage, storable
from gdpval.settings import AgentSettings, ModelSettings

MAX_API_RETRIES = 8
MAX_BACKOFF_S = 60.0
MAX_REQUEST_TIMEOUT_S = 600.0
MAX_CUT_OFFS = 3  # replies in a row cut off by the token limit before the attempt ends as truncated


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
    finish_reason: str | None = None  # of the last reply
    unmetered_turns: int = 0  # replies without (full) usage
    messages: list[dict[str, Any]] | None = None  # the conversation, kept when the run budget ended it: a resume goes on from it


@dataclass(frozen=True)
class Resumed:
    """Where a conversation the run budget cut goes on: its messages, its steps, the attempt it was."""

    messages: list[dict[str, Any]]
    steps: int
    attempt: int
    usage: Usage = field(default_factory=Usage)  # what the conversation cost so far: the sample's usage goes on from it
    cost: float | None = None


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
        viewer: Viewer | None = None,
    ):
        """`viewer` offers the `view` tool (the run's agent.viewImages): pictures of files for a vision model."""
        self.client = client
        self.model = model
        self.agent = agent
        self.tools = tools
        self.transcript = transcript
        self.deadline = deadline
        self.clock = clock or Clock()
        self.finish = finish
        self.viewer = viewer
        self.offered_tools = tools_for(finish, view=viewer is not None)
        self.offered = [tool["function"]["name"] for tool in self.offered_tools]
        self.outcome = LoopOutcome()
        self.cut_offs = 0  # consecutive replies cut off by the token limit

    def run(self, system: str | None, user: str, resumed: Resumed | None = None) -> LoopOutcome:
        """`system` None sends no system message at all; `resumed` goes on with a conversation the run budget cut."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system is not None else []
        messages.append({"role": "user", "content": user})
        context = {"policy": self.agent.context, "budget_tokens": self.agent.context_budget_tokens if self.agent.context != "none" else None}
        self.transcript.event("start", model=self.model.name, system=system, user=user, finish=self.finish, tools=self.offered, context=context)
        if resumed is not None:
            messages, self.outcome.steps, self.outcome.usage = list(resumed.messages), resumed.steps, resumed.usage
            self.transcript.event("resume", attempt=resumed.attempt, steps=resumed.steps, messages=len(messages))
        try:
            self._converse(messages)
        except LoopFailure as failure:
            self._fail(failure.kind, str(failure))
            if failure.kind == ErrorKind.budget:
                self.outcome.messages = messages
        self.transcript.event(
            "end",
            status=self.outcome.status.value,
            error_kind=self.outcome.error_kind,
            error=self.outcome.error,
            steps=self.outcome.steps,
            usage=self.outcome.usage.model_dump(),
            unmetered_turns=self.outcome.unmetered_turns,
            finish_reason=self.outcome.finish_reason,
        )
        return self.outcome

    def _converse(self, messages: list[dict[str, Any]]) -> None:
        while True:
            self._check_steps()
            messages[:] = self._fit_context(messages)
            reply = self._complete(messages)
            self.outcome.steps += 1
            self._count_cut_off(reply)
            if not reply.tool_calls:
                if not reply.cut_off and self.finish == "answer":
                    self._succeed(reply.content)
                    return
                if reply.cut_off:
                    self._follow_up(messages, reply, CUT_OFF, "cut_off")
                else:
                    self._follow_up(messages, reply, NUDGE, "nudge")
                continue
            messages.append(assistant_message(reply))
            pictures: list[tuple[str, bytes]] = []
            for index, call in enumerate(reply.tool_calls):
                parsed = parse_call(call.name, call.arguments, self.offered, cut_off=reply.cut_off)
                if parsed.name == "submit" and not parsed.problem:
                    self.transcript.event(
                        "submit",
                        id=call.id,
                        answer=parsed.argument,
                        repaired_arguments=parsed.repaired,
                        ignored=[later.id for later in reply.tool_calls[index + 1 :]],
                    )
                    self._succeed(parsed.argument)
                    return
                messages.append(self._run_tool(call, parsed, pictures))
            self._show(messages, pictures)

    def _check_steps(self) -> None:
        """At the step limit the attempt ends; as `truncated` when the last reply was cut off."""
        if self.outcome.steps < self.agent.max_steps:
            return
        if self.outcome.finish_reason == LENGTH:
            raise LoopFailure(ErrorKind.truncated, f"the last reply, at max_steps={self.agent.max_steps}, was cut off by the token limit")
        raise LoopFailure(ErrorKind.max_steps, f"no final answer within max_steps={self.agent.max_steps}")

    def _count_cut_off(self, reply: ModelReply) -> None:
        self.cut_offs = self.cut_offs + 1 if reply.cut_off else 0
        if self.cut_offs >= MAX_CUT_OFFS:
            limit = f"{self.model.token_limit_param}={self.model.max_tokens}" if self.model.max_tokens else "the server's own token limit"
            raise LoopFailure(ErrorKind.truncated, f"{self.cut_offs} replies in a row were cut off by the token limit ({limit})")

    def _follow_up(self, messages: list[dict[str, Any]], reply: ModelReply, text: str, kind: str) -> None:
        """Answer a reply that ends nothing with a user message, recorded only when it will be sent."""
        self._check_steps()
        messages += [{"role": "assistant", "content": storable(reply.content)}, {"role": "user", "content": text}]
        self.transcript.event(kind, content=text)

    def _fit_context(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation under the run's context policy; each elision is recorded."""
        if self.agent.context == "none":
            return messages
        fitted, elided = elide_old_output(messages, self.agent.context_budget_tokens)
        if elided.tool_call_ids:
            self.transcript.event(
                "context",
                policy=self.agent.context,
                budget_tokens=self.agent.context_budget_tokens,
                elided=elided.tool_call_ids,
                tokens_before=elided.tokens_before,
                tokens_after=elided.tokens_after,
            )
        return fitted

    def _succeed(self, text: str) -> None:
        self.outcome.status = SampleStatus.succeeded
        self.outcome.text = text

    def _remaining(self) -> float:
        remaining = self.deadline - self.clock.now()
        if remaining <= 0:
            raise LoopFailure(ErrorKind.deadline, "the sample's wall-clock deadline passed")
        return remaining

    def _complete(self, messages: list[dict[str, Any]]) -> ModelReply:
        for retry in range(MAX_API_RETRIES + 1):
            timeout = min(MAX_REQUEST_TIMEOUT_S, self._remaining())
            try:
                body = self._call(timeout, self._request(messages))
            except openai.OpenAIError as exc:
                self._retry_or_fail(exc, retry)
                continue
            return self._accept(body)
        raise AssertionError("unreachable: the last retry raises")

    def _call(self, timeout: float, request: dict[str, Any]) -> Any:
        """One request; the completion body as JSON, a stream's chunks assembled into one."""
        completions = self.client.with_options(timeout=timeout, max_retries=0).chat.completions
        if self.model.stream:
            with completions.create(**request, stream=True, stream_options={"include_usage": True}) as stream:
                return assemble_stream(chunk.to_dict() for chunk in stream)
        raw = completions.with_raw_response.create(**request)
        try:
            return raw.http_response.json()
        except ValueError:
            raise LoopFailure(ErrorKind.bad_request, f"the model API answered HTTP {raw.status_code} with a body that is not JSON") from None

    def _request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model.name, "messages": messages, "tools": self.offered_tools}
        if self.model.temperature is not None:
            request["temperature"] = self.model.temperature
        if self.model.max_tokens is not None:
            request[self.model.token_limit_param] = self.model.max_tokens
        if self.model.reasoning_effort is not None:
            request["reasoning_effort"] = self.model.reasoning_effort
        if self.model.extra_body:
            request["extra_body"] = self.model.extra_body
        return request

    def _retry_or_fail(self, exc: Exception, retry: int) -> None:
        if isinstance(exc, CallRefused):  # nothing was sent: the budget's doing, not the model API's
            self.transcript.event("refused", error_kind=exc.kind.value, detail=str(exc))
            raise LoopFailure(exc.kind, f"{exc}; this call was not sent")
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

    def _accept(self, body: Any) -> ModelReply:
        try:
            reply = parse_completion(body, self.outcome.steps)
        except ValueError as exc:
            raise LoopFailure(ErrorKind.bad_request, str(exc)) from None
        counted, complete = tokens(reply.usage)
        self.outcome.usage = self.outcome.usage.add(counted)
        self.outcome.unmetered_turns += not complete
        self.outcome.finish_reason = reply.finish_reason
        self.transcript.event(
            "response",
            content=reply.content,
            tool_calls=[{"id": c.id, "given_id": c.given_id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
            finish_reason=reply.finish_reason,
            usage=reply.usage,
            **({"reasoning": reply.reasoning} if reply.reasoning else {}),
        )
        return reply

    def _run_tool(self, call: ToolCall, parsed: ParsedCall, pictures: list[tuple[str, bytes]]) -> dict[str, Any]:
        content, timeout = (parsed.problem, None) if parsed.problem else self._execute(parsed, pictures)
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
        return {"role": "tool", "tool_call_id": call.id, "content": storable(content)}

    def _execute(self, parsed: ParsedCall, pictures: list[tuple[str, bytes]]) -> tuple[str, float]:
        """The tool's rendered result and the timeout it ran under; a `view` call's pictures go to `pictures`."""
        from gdpval.sandbox.client import SandboxError, SandboxUnavailable

        agent = self.agent
        timeout = applied_timeout(parsed.timeout, agent.command_timeout_seconds, agent.max_command_timeout_seconds, self._remaining())
        try:
            if parsed.name == VIEW and self.viewer is not None:
                looked = self.viewer.view(parsed.argument, timeout)
                pictures.extend((parsed.argument, png) for png in looked.images)
                return looked.text, timeout
            result = self.tools.call(parsed.name, {TOOL_ARGUMENT[parsed.name]: parsed.argument, "timeout": timeout}, timeout)
        except SandboxUnavailable as exc:
            raise LoopFailure(ErrorKind.sandbox, f"the sandbox stopped answering: {exc}") from None
        except SandboxError as exc:
            return f"error: the sandbox refused the call: {exc}", timeout
        return render_result(result.output, result.exit_code, result.timed_out, timeout), timeout

    def _show(self, messages: list[dict[str, Any]], pictures: list[tuple[str, bytes]]) -> None:
        """The turn's pictures, after all its tool results (as the API requires), in one user message."""
        message = images_message(pictures)
        if message is None:
            return
        messages.append(message)
        self.transcript.event(
            "pictures",
            files=[name for name, _ in pictures],
            bytes=[len(png) for _, png in pictures],
            sha256=[hashlib.sha256(png).hexdigest() for _, png in pictures],
        )

    def _fail(self, kind: ErrorKind, message: str) -> None:
        self.outcome.status = SampleStatus.failed
        self.outcome.error_kind = kind
        self.outcome.error = message


def assistant_message(reply: ModelReply) -> dict[str, Any]:
    """The assistant turn as plain JSON, with exactly the tool calls the model made under the ids the
    loop answers them by, and no reasoning field (servers that send one may refuse it back)."""
    return {
        "role": "assistant",
        "content": storable(reply.content),
        "tool_calls": [{"id": c.id, "type": "function", "function": {"name": storable(c.name), "arguments": storable(c.arguments)}} for c in reply.tool_calls],
    }
