"""Stand-ins for the agent loop's surroundings: a fake clock whose sleeps only advance fake time, the
model endpoint in process (a real openai client over an httpx mock transport), and the sandbox's
tools. Shared by tests/unit/test_agent_loop.py and test_agent_harness.py."""

import httpx2
import openai

from gdpval.agent.loop import AgentSettings, Clock, ModelSettings

START = 1000.0


def settings(max_steps: int = 250) -> tuple[ModelSettings, AgentSettings]:
    """The loop's settings, built in this one place (the classes are moving from gdpval.manifest to gdpval.settings)."""
    return ModelSettings(name="scripted"), AgentSettings(max_steps=max_steps)


class FakeClock:
    """Time stands still until something advances it; every sleep is recorded."""

    def __init__(self) -> None:
        self.t = START
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds

    def clock(self) -> Clock:
        return Clock(now=lambda: self.t, sleep=self.sleep)


def reply(status: int, body: dict, headers: dict | None = None) -> httpx2.Response:
    return httpx2.Response(status, headers=headers or {}, json=body)


def error(status: int, message: str, code: str | None = None, headers: dict | None = None) -> httpx2.Response:
    return reply(status, {"error": {"message": message, "type": "error", "param": None, "code": code}}, headers)


def completion(message: dict) -> httpx2.Response:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        },
    )


ANSWER = completion({"content": "All done."})
TOOL_CALL = completion({"content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]})


class StandIn:
    """The model endpoint: request n gets replies[n] (the last one repeats); each takes `latency` fake seconds."""

    def __init__(self, fake: FakeClock, replies: list[httpx2.Response], latency: float = 0.0) -> None:
        self.fake, self.replies, self.latency = fake, replies, latency
        self.timeouts: list[float] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.timeouts.append(request.extensions["timeout"]["read"])
        self.fake.t += self.latency
        return self.replies[min(len(self.timeouts), len(self.replies)) - 1]

    def client(self) -> openai.OpenAI:
        transport = httpx2.MockTransport(self.handle)
        return openai.OpenAI(base_url="http://model.test/v1", api_key="k", max_retries=0, http_client=httpx2.Client(transport=transport))


class Output:
    def __init__(self, output: str) -> None:
        self.output, self.exit_code, self.timed_out = output, 0, False


class Tools:
    """The sandbox: every call answers at once, or after `cost` fake seconds."""

    def __init__(self, fake: FakeClock, cost: float = 0.0) -> None:
        self.fake, self.cost = fake, cost
        self.calls: list[tuple[str, dict, float]] = []

    def call(self, tool: str, arguments: dict, timeout: float) -> Output:
        self.calls.append((tool, arguments, timeout))
        self.fake.t += self.cost
        return Output("file.txt")
