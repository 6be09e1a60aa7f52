"""Classification and backoff of model API errors (the HTTP behaviour is tested against the scripted server)."""

import httpx2
import openai
import pytest

from gdpval.agent.loop import classify, retry_delay
from gdpval.sample import ErrorKind

REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def status_error(cls, status, body=None, headers=None):
    response = httpx2.Response(status, request=REQUEST, headers=headers or {}, json=body or {})
    return cls(f"status {status}", response=response, body=(body or {}).get("error"))


@pytest.mark.parametrize(
    "exc, kind, retryable",
    [
        (status_error(openai.RateLimitError, 429), ErrorKind.rate_limited, True),
        (status_error(openai.InternalServerError, 503), ErrorKind.server_error, True),
        (status_error(openai.AuthenticationError, 401), ErrorKind.auth, False),
        (
            status_error(openai.BadRequestError, 400, {"error": {"code": "context_length_exceeded", "message": "too long"}}),
            ErrorKind.context_length,
            False,
        ),
        (status_error(openai.BadRequestError, 400, {"error": {"message": "bad"}}), ErrorKind.bad_request, False),
        (openai.APITimeoutError(request=REQUEST), ErrorKind.timeout, True),
        (openai.APIConnectionError(request=REQUEST), ErrorKind.connection, True),
    ],
)
def test_classify(exc, kind, retryable):
    assert classify(exc) == (kind, retryable)


def test_retry_after_is_honoured():
    assert retry_delay(status_error(openai.RateLimitError, 429, headers={"retry-after": "7"}), 0) == 7.0


def test_backoff_grows_and_is_capped():
    exc = openai.APIConnectionError(request=REQUEST)
    assert 0.5 <= retry_delay(exc, 0) <= 1.0
    assert 4.0 <= retry_delay(exc, 3) <= 8.0
    assert retry_delay(exc, 20) <= 60.0
