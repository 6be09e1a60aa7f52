"""The agent loop: classification and backoff of model API errors, and the loop's retry, backoff,
deadline and max-steps paths driven through its injected clock (no test here sleeps)."""

import httpx2
import openai
import pytest

from gdpval.agent.loop import AgentLoop, classify, retry_delay
from gdpval.agent.transcript import Transcript
from gdpval.sample import ErrorKind, SampleStatus
from support.agent_loop import ANSWER, START, TOOL_CALL, FakeClock, StandIn, Tools, error, settings

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


# The loop itself: a real openai client whose HTTP goes to an in-process stand-in of the model
# endpoint, and a fake clock whose sleeps only advance the fake time (tests/support/agent_loop.py).


@pytest.fixture
def no_jitter(monkeypatch):
    """Backoff takes its full exponential value, so the recorded sleeps are exact."""
    monkeypatch.setattr("gdpval.agent.loop.random.random", lambda: 1.0)


def run_loop(tmp_path, fake: FakeClock, model: StandIn, tools: Tools | None = None, max_steps: int = 250, deadline: float = float("inf")):
    model_settings, agent_settings = settings(max_steps)
    with Transcript(tmp_path / "transcript.jsonl") as transcript:
        loop = AgentLoop(model.client(), model_settings, agent_settings, tools or Tools(fake), transcript, deadline, fake.clock())
        return loop.run("system", "user")


def test_429s_wait_as_long_as_retry_after_says(tmp_path):
    fake = FakeClock()
    model = StandIn(
        fake,
        [error(429, "slow down", "rate_limit_exceeded", {"retry-after": "7"}), error(429, "slow down", "rate_limit_exceeded", {"retry-after": "2.5"}), ANSWER],
    )
    outcome = run_loop(tmp_path, fake, model)
    assert fake.sleeps == [7.0, 2.5]
    assert (outcome.status, outcome.error_kind, outcome.text) == (SampleStatus.succeeded, None, "All done.")
    assert (outcome.steps, outcome.api_errors, len(model.timeouts)) == (1, 2, 3)


def test_500s_back_off_exponentially_up_to_the_cap_then_give_up(tmp_path, no_jitter):
    fake = FakeClock()
    model = StandIn(fake, [error(500, "the server had an error")])
    outcome = run_loop(tmp_path, fake, model)
    assert fake.sleeps == [1, 2, 4, 8, 16, 32, 60, 60]
    assert (outcome.status, outcome.error_kind) == (SampleStatus.failed, ErrorKind.server_error)
    assert "the server had an error" in outcome.error
    assert (outcome.steps, outcome.api_errors, len(model.timeouts)) == (0, 9, 9)


def test_jitter_keeps_backoff_between_half_and_full(tmp_path, monkeypatch):
    monkeypatch.setattr("gdpval.agent.loop.random.random", lambda: 0.0)
    fake = FakeClock()
    run_loop(tmp_path, fake, StandIn(fake, [error(503, "unavailable"), error(503, "unavailable"), ANSWER]))
    assert fake.sleeps == [0.5, 1.0]


def test_deadline_reached_during_backoff_ends_before_sleeping_past_it(tmp_path, no_jitter):
    fake = FakeClock()
    model = StandIn(fake, [error(500, "the server had an error")])
    outcome = run_loop(tmp_path, fake, model, deadline=START + 10)
    assert fake.sleeps == [1, 2, 4]  # the next backoff (8 s) would end after the deadline (3 s left)
    assert (outcome.status, outcome.error_kind) == (SampleStatus.failed, ErrorKind.deadline)
    assert "backing off" in outcome.error and outcome.api_errors == 4
    assert model.timeouts == [10, 9, 7, 3]  # each request may take only what is left
    assert fake.t <= START + 10


def test_retry_after_past_the_deadline_is_not_waited_for(tmp_path):
    fake = FakeClock()
    model = StandIn(fake, [error(429, "slow down", "rate_limit_exceeded", {"retry-after": "30"})])
    outcome = run_loop(tmp_path, fake, model, deadline=START + 10)
    assert fake.sleeps == []
    assert (outcome.error_kind, outcome.api_errors, len(model.timeouts)) == (ErrorKind.deadline, 1, 1)


def test_deadline_spent_in_tools_stops_the_next_model_call(tmp_path):
    fake = FakeClock()
    model, tools = StandIn(fake, [TOOL_CALL], latency=1), Tools(fake, cost=4)
    outcome = run_loop(tmp_path, fake, model, tools, deadline=START + 12)
    # Two turns take 1 + 4 s each; the third call is made with 2 s left and its tool gets only 1 s.
    assert [timeout for _, _, timeout in tools.calls] == [11, 6, 1]
    assert model.timeouts == [12, 7, 2]
    assert (outcome.status, outcome.error_kind, outcome.steps) == (SampleStatus.failed, ErrorKind.deadline, 3)
    assert fake.sleeps == [] and outcome.api_errors == 0


def test_max_steps_ends_a_model_that_never_answers(tmp_path):
    fake = FakeClock()
    model, tools = StandIn(fake, [TOOL_CALL]), Tools(fake)
    outcome = run_loop(tmp_path, fake, model, tools, max_steps=3)
    assert (outcome.status, outcome.error_kind, outcome.steps) == (SampleStatus.failed, ErrorKind.max_steps, 3)
    assert "max_steps=3" in outcome.error
    assert len(model.timeouts) == 3 and [(tool, args["command"]) for tool, args, _ in tools.calls] == [("bash", "ls")] * 3
    assert outcome.usage.input_tokens == 30 and outcome.api_errors == 0 and fake.sleeps == []


@pytest.mark.parametrize(
    "response, kind",
    [
        (error(400, "bad request"), ErrorKind.bad_request),
        (error(400, "This model's maximum context length is 128000 tokens", "context_length_exceeded"), ErrorKind.context_length),
        (error(401, "Incorrect API key provided", "invalid_api_key"), ErrorKind.auth),
    ],
)
def test_non_retryable_errors_end_the_attempt_at_once(tmp_path, response, kind):
    fake = FakeClock()
    model = StandIn(fake, [response, ANSWER])
    outcome = run_loop(tmp_path, fake, model)
    assert (outcome.status, outcome.error_kind, outcome.steps, outcome.api_errors) == (SampleStatus.failed, kind, 0, 1)
    assert fake.sleeps == [] and len(model.timeouts) == 1
