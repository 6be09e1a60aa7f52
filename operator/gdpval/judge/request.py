"""What both judges share: their options, and one judge call retried on server errors and malformed replies.

A rejected key is never echoed (the server's message may hold it); a client error other than a timeout,
a conflict or a rate limit ends the tries at once, since asking again gets the same answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import openai

from gdpval.judge.usage import Prices, Usage, usage_of

RETRIED_STATUSES = {408, 409, 429}
ERROR_SHOWN = 300
T = TypeVar("T")


@dataclass(frozen=True)
class JudgeOptions:
    model: str
    concurrency: int = 4
    tries: int = 3
    backoff_seconds: float = 2.0
    timeout_seconds: float = 600.0
    cache_dir: Path = Path.home() / ".cache" / "gdpval"  # where the run's dataset is cached when a file is not in storage
    prices: Prices | None = None  # per million tokens, for the judge's cost


@dataclass(frozen=True)
class Answer(Generic[T]):
    """What one judge call gave: the parsed reply (None when every try failed), its raw text, the tries, the last
    error and what all tries spent."""

    parsed: T | None
    content: str
    tries: int
    error: str
    usage: Usage


def describe(exc: openai.APIStatusError) -> str:
    """The HTTP status and the server's message; for a rejected key only the status (the message may echo the key)."""
    if exc.status_code in (401, 403):
        return f"HTTP {exc.status_code}: the judge endpoint rejected the API key"
    return f"HTTP {exc.status_code}: {' '.join(str(exc.message).split())[:ERROR_SHOWN]}"


def call(client: openai.OpenAI, options: JudgeOptions, body: dict[str, Any], parse: Callable[[str | None], T], record: Callable[[Usage], None]) -> Answer[T]:
    """`body` sent until `parse` accepts the reply (a ValueError is a malformed reply), with exponential backoff;
    each answered try is `record`ed at once, so spending is journalled even when judging is killed."""
    error, usage = "", Usage()
    for attempt in range(1, options.tries + 1):
        try:
            reply = client.with_options(timeout=options.timeout_seconds).chat.completions.create(model=options.model, **body)
            spent = usage_of(reply, options.prices)
            record(spent)
            usage += spent
            content = reply.choices[0].message.content if reply.choices else None
            return Answer(parse(content), content or "", attempt, "", usage)
        except ValueError as exc:
            error = f"malformed reply: {exc}"
        except openai.APIStatusError as exc:
            error = describe(exc)
            if exc.status_code < 500 and exc.status_code not in RETRIED_STATUSES:
                return Answer(None, "", attempt, error, usage)
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            error = f"{exc.__class__.__name__}: {str(exc)[:ERROR_SHOWN]}"
        if attempt < options.tries:
            time.sleep(options.backoff_seconds * 2 ** (attempt - 1))
    return Answer(None, "", options.tries, error, usage)
