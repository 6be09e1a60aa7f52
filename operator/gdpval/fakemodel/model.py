"""The scripted model behind the fake server: its routes, faults, outage, gate and replies, with no socket.

`FakeModel.handle` takes a request's method, path, authorization and body and returns a `Reply`; the
HTTP front (`server`) only carries them. Unit tests drive it directly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gdpval.fakemodel import dialects, judge, script
from gdpval.judge import wire

# Per request: also leave hostile entries beside the deliverable, to test what collection refuses.
HOSTILE_BODY_FIELD = "fake_hostile"
FAULTS_BODY_FIELD = "fake_faults"
# Per request: play this list of chosen tool calls ({"bash": ...} or {"python_exec": ...}) instead of the inventory.
SCRIPT_BODY_FIELD = "fake_script"
CONTROL_PREFIX = "/fake/"
_COUNTER_LIMIT = 10_000
_CONTEXT_WINDOW = 128_000


@dataclass(frozen=True)
class FakeModelConfig:
    """Server-wide settings; ``faults`` maps a kind in ``script.FAULT_KINDS`` to a probability."""

    model: str = "scripted"
    api_key: str | None = None
    faults: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    retry_after: float = 1.0
    slow_seconds: float = 2.0
    fault_repeats: int = 1
    latency: float = 0.0
    hold_after: int | None = None  # hold chat replies after this many (None: never)
    judge_prefers: str = "content"  # how pairwise judge requests are answered (judge.PREFERENCES)
    dialects: tuple[str, ...] = ()  # names in dialects.DIALECTS
    outage_after: int | None = None  # chat requests served before the outage starts (None: no outage)
    outage_seconds: float = 0.0
    max_concurrent: int | None = None  # chat requests in flight above which one gets a 429
    make_files: bool = False  # the write step also makes a file of each type the prompt asks for (the demo)

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", script.validate_faults(self.faults))
        judge.check_preference(self.judge_prefers)
        object.__setattr__(self, "dialects", dialects.validate(self.dialects))
        if self.fault_repeats < 1:
            raise ValueError("fault_repeats must be at least 1")
        for name in ("hold_after", "outage_after"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        for name in ("retry_after", "slow_seconds", "latency", "outage_seconds"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a non-negative number of seconds")


@dataclass
class Reply:
    """An HTTP answer, plus how long to wait before sending it."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    events: list[dict[str, Any]] | None = None  # a streamed answer: sent as server-sent events instead of body


def error_reply(status: int, message: str, kind: str, code: str | None, param: str | None = None) -> Reply:
    """An error in OpenAI's shape, so the client raises its usual exception classes."""
    error = {"message": message, "type": kind, "param": param, "code": code}
    return Reply(status, {"error": error})


def invalid(message: str, code: str | None = None, param: str | None = None, status: int = 400) -> Reply:
    return error_reply(status, message, "invalid_request_error", code, param)


def estimate_tokens(value: object) -> int:
    """A deterministic stand-in for a tokenizer: about four characters per token."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return max(1, math.ceil(len(text) / 4))


class FiredFaults:
    """Bounded memory of faults already fired per request, so retries eventually pass."""

    def __init__(self, limit: int = _COUNTER_LIMIT) -> None:
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def try_fire(self, request_hash: str, kind: str, repeats: int) -> bool:
        """Count one firing unless this request already saw ``repeats`` of this kind."""
        key = (request_hash, kind)
        with self._lock:
            count = self._counts.pop(key, 0)
            self._counts[key] = count + 1 if count < repeats else count
            while len(self._counts) > self._limit:
                self._counts.popitem(last=False)
            return count < repeats


class ReplyGate:
    """Open, or holding chat requests once a budget of passes is used up, until released."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._passes: int | None = None  # None: open; n: requests still let through before holding
        self._releases = 0
        self._cut_releases: set[int] = set()  # the releases that cut what they let go
        self._waiting = 0

    def hold(self, after: Any = 0) -> None:
        """Let ``after`` more requests through, then hold the rest."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError("after must be a whole number, at least 0")
        with self._cond:
            self._passes = after

    def release(self, cut: bool = False) -> None:
        """Let every held request go and open the gate; with `cut`, those held are to be answered with an error."""
        with self._cond:
            self._passes = None
            self._releases += 1
            if cut:
                self._cut_releases.add(self._releases)
            self._cond.notify_all()

    @property
    def waiting(self) -> int:
        with self._cond:
            return self._waiting

    def pass_through(self) -> bool:
        """True at once while open or while passes remain; otherwise block until a release, then False when it cut."""
        with self._cond:
            if self._passes is None:
                return True
            if self._passes > 0:
                self._passes -= 1
                return True
            releases = self._releases
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: self._releases != releases)
            finally:
                self._waiting -= 1
            return releases + 1 not in self._cut_releases


class FakeModel:
    """Transport-free request handling: parse, authorise, plan, inject faults, shape replies."""

    def __init__(self, config: FakeModelConfig) -> None:
        self.config = config
        self.gate = ReplyGate()
        if config.hold_after is not None:
            self.gate.hold(config.hold_after)
        self._fired = FiredFaults()
        self._stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._chats = 0  # chat requests seen, for the outage's start
        self._outage_until: float | None = None
        self._in_flight = 0  # chat requests being answered (their reply delay included)
        self._peak = 0
        self._judged: set[str] = set()  # digests of the judge requests answered

    def stats(self) -> dict[str, Any]:
        """Counts of requests, completions, faults by kind, replies by HTTP status, and held requests."""
        with self._lock:
            counts = dict(self._stats)
        return {
            "requests": counts.get("requests", 0),
            "completions": counts.get("completions", 0),
            "faults": _with_prefix(counts, "fault:"),
            "statuses": {int(k): v for k, v in _with_prefix(counts, "status:").items()},
            "held": self.gate.waiting,
            "judge_repeats": counts.get("judge_repeats", 0),
            "in_flight": self._in_flight,
            "peak_in_flight": self._peak,
        }

    def answering(self, path: str) -> _InFlight:
        """Count a chat request as in flight from its arrival until its reply is sent."""
        return _InFlight(self, path.split("?", 1)[0].rstrip("/").endswith("/chat/completions"))

    def _enter(self) -> int:
        with self._lock:
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            return self._in_flight

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _in_outage(self, chat: bool) -> bool:
        """Whether the endpoint is down now; a chat request may be the one that starts the outage."""
        config = self.config
        if config.outage_after is None:
            return False
        with self._lock:
            if chat and self._outage_until is None:
                self._chats += 1
                if self._chats > config.outage_after:
                    self._outage_until = time.monotonic() + config.outage_seconds
            return self._outage_until is not None and time.monotonic() < self._outage_until

    def count(self, *keys: str) -> None:
        with self._lock:
            self._stats.update(keys)

    def handle(self, method: str, path: str, authorization: str | None, raw: bytes) -> Reply:
        """Route one request; every model API reply is counted by status (control requests are not)."""
        path = path.split("?", 1)[0].rstrip("/")
        if path.startswith(CONTROL_PREFIX):
            return self._check_key(authorization) or self._control(method, path, raw)
        self.count("requests")
        if self._in_outage(path.endswith("/chat/completions")):
            reply = error_reply(503, "The server is temporarily unavailable (an outage injected by the fake model).", "server_error", None)
        else:
            reply = self._route(method, path, authorization, raw)
        self.count(f"status:{reply.status}")
        return reply

    def _control(self, method: str, path: str, raw: bytes) -> Reply:
        action = path[len(CONTROL_PREFIX) :]
        wanted = {"hold": "POST", "release": "POST", "stats": "GET"}.get(action)
        if wanted is None:
            return invalid(f"Unknown path {path}; try {CONTROL_PREFIX}hold, release or stats.", "unknown_url", status=404)
        if method != wanted:
            return invalid(f"Method {method} is not allowed on {path}.", "method_not_allowed", status=405)
        if action == "hold":
            try:
                body = json.loads(raw or b"{}")
                self.gate.hold(body.get("after", 0) if isinstance(body, dict) else None)
            except ValueError as exc:
                return invalid(f'Send {{"after": n}} with a whole number n >= 0: {exc}.', param="after")
        elif action == "release":
            try:
                body = json.loads(raw.strip() or b"{}")
            except ValueError:
                body = None
            cut = body.get("cut", False) if isinstance(body, dict) else None
            if not isinstance(cut, bool):
                return invalid('Send {"cut": true} or {"cut": false}, or no body.', param="cut")
            self.gate.release(cut)
        return Reply(200, self.stats())

    def _route(self, method: str, path: str, authorization: str | None, raw: bytes) -> Reply:
        wanted = {"/v1/models": "GET", "/v1/chat/completions": "POST"}.get(path)
        if path.startswith("/v1/models/"):
            wanted = "GET"
        if wanted is None:
            return invalid(f"Unknown path {path}; try /v1/chat/completions or /v1/models.", "unknown_url", status=404)
        denied = self._check_key(authorization)
        if denied is not None:
            return denied
        if method != wanted:
            return invalid(f"Method {method} is not allowed on {path}.", "method_not_allowed", status=405)
        if path.startswith("/v1/models/"):
            return self._model(path[len("/v1/models/") :])
        return self._models() if path == "/v1/models" else self._chat(raw)

    def _check_key(self, authorization: str | None) -> Reply | None:
        expected = self.config.api_key
        if expected is None:
            return None
        given = (authorization or "").removeprefix("Bearer ").strip()
        if authorization and hmac.compare_digest(given.encode(), expected.encode()):
            return None
        problem = "Incorrect API key provided." if given else "You didn't provide an API key."
        return invalid(f"{problem} Send Authorization: Bearer <key>.", "invalid_api_key", status=401)

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.config.model, "object": "model", "created": 0, "owned_by": "gdpval-fake-model"}

    def _models(self) -> Reply:
        return Reply(200, {"object": "list", "data": [self._model_card()]})

    def _model(self, name: str) -> Reply:
        return Reply(200, self._model_card()) if name == self.config.model else self._unknown_model(name)

    def _unknown_model(self, name: object) -> Reply:
        message = f"The model `{name}` does not exist or you do not have access to it."
        return invalid(message, "model_not_found", status=404)

    def _chat(self, raw: bytes) -> Reply:
        if not self.gate.pass_through():
            self.count("fault:cut")
            return error_reply(503, "The request was held, then cut (injected by the fake model).", "server_error", None)
        cap = self.config.max_concurrent
        if cap is not None and self._in_flight > cap:
            self.count("fault:concurrency")
            return self._fault_reply("429", [])
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            return invalid(f"The request body is not valid JSON: {exc}.")
        problem = self._check_body(body)
        if problem is not None:
            return problem
        try:
            faults = self._faults_for(body)
        except ValueError as exc:
            return invalid(f"Invalid {FAULTS_BODY_FIELD}: {exc}.", param=FAULTS_BODY_FIELD)
        try:
            spoken = dialects.validate(body.get(dialects.BODY_FIELD, self.config.dialects))
        except ValueError as exc:
            return invalid(f"Invalid {dialects.BODY_FIELD}: {exc}.", param=dialects.BODY_FIELD)
        try:
            dialects.check_request(body, spoken)
        except dialects.Refused as exc:
            return invalid(str(exc), exc.code, exc.param)
        if wire.is_judge_request(body) or wire.is_pairwise_request(body):
            return self._judge(body, faults)
        if SCRIPT_BODY_FIELD in body:
            try:
                steps = script.validate_script(body[SCRIPT_BODY_FIELD])
            except ValueError as exc:
                return invalid(f"Invalid {SCRIPT_BODY_FIELD}: {exc}.", param=SCRIPT_BODY_FIELD)
            self.count("completions")
            message = script.scripted_message(body["messages"], steps)
            turn = f"script-{sum(1 for m in body['messages'] if m.get('role') == 'assistant')}"
            return self._answer(body, request_hash(body), dialects.shape(message, spoken, turn), spoken, self.config.latency)
        return self._complete(body, faults, spoken)

    def _check_body(self, body: Any) -> Reply | None:
        if not isinstance(body, dict):
            return invalid("The request body must be a JSON object.")
        if body.get("model") != self.config.model:
            return self._unknown_model(body.get("model"))
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return invalid("'messages' must be a non-empty array of objects.", param="messages")
        return None

    def _faults_for(self, body: dict[str, Any]) -> dict[str, float]:
        """Per-request ``fake_faults`` replace the server-wide map for that request."""
        if FAULTS_BODY_FIELD not in body:
            return self.config.faults
        return script.validate_faults(body[FAULTS_BODY_FIELD])

    def _complete(self, body: dict[str, Any], faults: dict[str, float], spoken: tuple[str, ...]) -> Reply:
        messages = body["messages"]
        submit = script.offers_tool(body.get("tools"), script.SUBMIT_TOOL)
        turn = script.plan(messages, hostile=bool(body.get(HOSTILE_BODY_FIELD)), submit=submit, make=self.config.make_files)
        digest = request_hash(body)
        fault = self._fire(script.decide_fault(faults, self.config.seed, turn), digest, turn)
        delay = self.config.latency
        if fault == "slow":
            delay += self.config.slow_seconds
        elif fault in ("429", "500", "context_length"):
            reply = self._fault_reply(fault, messages)
            reply.delay = delay
            return reply
        message = script.render_message(turn, fault if fault in script.CONTENT_FAULTS else None)
        self.count("completions")
        return self._answer(body, digest, dialects.shape(message, spoken, f"{turn.step}-{turn.attempt}"), spoken, delay)

    def _judge(self, body: dict[str, Any], faults: dict[str, float]) -> Reply:
        """Judge mode: scores for the rubric items the request carries, or a preference between its two sets; its own faults."""
        messages = body["messages"]
        pairwise = wire.is_pairwise_request(body)
        items = None if pairwise else wire.rubric_of(messages)
        sets = wire.sets_of(messages) if pairwise else None
        if not pairwise and items is None:
            return invalid(f"A judge request must carry its rubric as a text part starting {wire.RUBRIC_HEADER!r}.", param="messages")
        if pairwise and sets is None:
            return invalid(f"A pairwise judge request must show two sets, each after a text part starting {wire.SET_HEADER!r} A or B.", param="messages")
        digest = request_hash(body)
        fault = judge.decide_fault(faults, self.config.seed, digest)
        if fault is not None and self._fired.try_fire(digest, fault, self.config.fault_repeats):
            self.count(f"fault:{fault}")
        else:
            fault = None
        if fault in ("429", "500"):
            return self._fault_reply(fault, messages)
        self._count_judged(digest)
        malformed = fault == "malformed"
        if sets is not None:
            content = judge.pairwise_content(self.config.judge_prefers, sets, malformed)
        else:
            content = judge.reply_content(items or [], digest, malformed)
        message = {"role": "assistant", "content": content}
        return self._answer(body, digest, message, (), self.config.latency)

    def _count_judged(self, digest: str) -> None:
        """A judge completion; a repeat when an identical request was answered before."""
        with self._lock:
            self._stats["completions"] += 1
            if digest in self._judged:
                self._stats["judge_repeats"] += 1
            self._judged.add(digest)

    def _fire(self, fault: str | None, digest: str, turn: script.Plan) -> str | None:
        """Apply the repeat limits; context_length is permanent, like the real error."""
        if fault is None:
            return None
        repeats = self.config.fault_repeats
        if fault in script.CONTENT_FAULTS and turn.content_faults >= repeats:
            return None
        if fault != "context_length" and not self._fired.try_fire(digest, fault, repeats):
            return None
        self.count(f"fault:{fault}")
        return fault

    def _fault_reply(self, fault: str, messages: list[dict[str, Any]]) -> Reply:
        injected = "(injected by the fake model)"
        if fault == "429":
            wait = f"{self.config.retry_after:g}"
            message = f"Rate limit reached for {self.config.model} {injected}. Please try again in {wait}s."
            reply = error_reply(429, message, "requests", "rate_limit_exceeded")
            reply.headers["Retry-After"] = wait
            return reply
        if fault == "500":
            return error_reply(500, f"The server had an error while processing your request {injected}.", "server_error", None)
        tokens = _CONTEXT_WINDOW + estimate_tokens(messages)
        message = f"This model's maximum context length is {_CONTEXT_WINDOW} tokens. However, your messages resulted in {tokens} tokens {injected}."
        return invalid(message, "context_length_exceeded", "messages")

    def _answer(self, body: dict[str, Any], digest: str, message: dict[str, Any], spoken: tuple[str, ...], delay: float) -> Reply:
        """The completion within the request's token limit, whole or as a stream's chunks."""
        message, was_cut = dialects.cut(message, dialects.token_limit(body))
        completion = self._completion(digest, body, message, spoken, "length" if was_cut else None)
        if body.get("stream") is True:
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            return Reply(200, {}, delay=delay, events=dialects.chunks(completion, include_usage))
        return Reply(200, completion, delay=delay)

    def _completion(self, digest: str, body: dict[str, Any], message: dict[str, Any], spoken: tuple[str, ...], finish: str | None) -> dict[str, Any]:
        prompt_tokens = estimate_tokens(body["messages"])
        completion_tokens = estimate_tokens(message.get("content") or message.get("tool_calls") or "")
        finish = finish or ("tool_calls" if message.get("tool_calls") else "stop")
        message = {**{k: v for k, v in message.items() if v is not None or k == "content"}, "refusal": None}
        completion = {
            "id": "chatcmpl-" + digest[:24],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.config.model,
            "system_fingerprint": "fp_fake_model",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        }
        usage = dialects.usage(prompt_tokens, completion_tokens, body.get("reasoning_effort"), spoken)
        return completion if usage is None else completion | {"usage": usage}


def _with_prefix(counts: dict[str, int], prefix: str) -> dict[str, int]:
    return {key[len(prefix) :]: value for key, value in counts.items() if key.startswith(prefix)}


def request_hash(body: dict[str, Any]) -> str:
    """Identity of a request, equal for an identical retry."""
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class _InFlight:
    """A context that counts one chat request in flight (other requests pass uncounted)."""

    def __init__(self, app: FakeModel, chat: bool):
        self.app = app
        self.chat = chat

    def __enter__(self) -> None:
        if self.chat:
            self.app._enter()

    def __exit__(self, *exc: object) -> None:
        if self.chat:
            self.app._leave()
