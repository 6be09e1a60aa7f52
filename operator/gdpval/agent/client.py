"""The OpenAI client and a pre-flight check that catches endpoint mistakes before any sample runs."""

from __future__ import annotations

import os
import socket
import time
import urllib.request
from urllib.parse import urlsplit

import httpx2
import openai

from gdpval.agent.governor import GovernedTransport, Governor, Meter
from gdpval.errors import GdpvalError

PLACEHOLDER_KEY = "not-needed"  # local servers often accept any key; the client insists on one
PREFLIGHT_TIMEOUT_S = 15.0
REACH_TIMEOUT_S = 120.0  # how long a pod started ahead tries to connect to its endpoint before it says ready anyway
REACH_CONNECT_S = 1.0  # one try's connect timeout: a dropped SYN is retried now, not after the kernel's backoff
BODY_SHOWN = 200  # characters of an error body quoted back


def make_client(base_url: str | None, api_key: str | None = None, key_source: str = "OPENAI_API_KEY") -> openai.OpenAI:
    """Retries are ours (the loop records each), so the client's own are off."""
    key = api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY
    return openai.OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None, api_key=header_safe_key(key, key_source), max_retries=0)


def connection_pool(client: openai.OpenAI, size: int) -> httpx2.HTTPTransport:
    """The run's connections to the endpoint, through the proxy the environment names for it (if any)."""
    url = str(client.base_url)
    host = urlsplit(url).hostname or ""
    proxy = None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(urlsplit(url).scheme)
    return httpx2.HTTPTransport(proxy=proxy, limits=httpx2.Limits(max_connections=None, max_keepalive_connections=max(20, size)))


def governed(client: openai.OpenAI, pool: httpx2.BaseTransport, governor: Governor, meter: Meter) -> openai.OpenAI:
    """The client one sample attempt uses: the run's connection pool, its calls counted on `meter`
    and passed through the run's governor (budget, outage breaker, rate limiter). The environment's
    proxies are the pool's business: here they would route calls around the governor."""
    http = openai.DefaultHttpx2Client(transport=GovernedTransport(pool, governor, meter), trust_env=False)
    return client.with_options(http_client=http)


class _NoSend(httpx2.BaseTransport):
    """A transport that sends nothing: `rehearse` stops every request here."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("rehearsal: not sent", request=request)


def rehearse(client: openai.OpenAI) -> None:
    """Both kinds of chat request the loop makes, stopped before they leave the process: openai imports its
    chat resources and builds its request types on first use (0.3 to 0.5 s on a loaded node), which a pod
    started ahead pays before its go instead of after it. Nothing is sent, counted or governed."""
    dry = client.with_options(http_client=openai.DefaultHttpx2Client(transport=_NoSend(), trust_env=False), max_retries=0)
    request: dict = {"model": "rehearsal", "messages": [{"role": "user", "content": ""}]}
    for call in (
        lambda: dry.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}),
        lambda: dry.chat.completions.with_raw_response.create(**request),
    ):
        try:
            call()
        except openai.APIConnectionError:
            pass


def reach(base_url: str, limit_s: float = REACH_TIMEOUT_S, connect_s: float = REACH_CONNECT_S) -> float | None:
    """Open and close one TCP connection to the model endpoint; the seconds it took, None if it never answered.
    A new pod's first packets can be dropped until the node's network policy knows its address, and the kernel
    retries a lost SYN at 1, 2, 4 ... 32 s (a sample once took 65 s from its go to its first request): a pod
    started ahead pays that before it says ready, with short tries. An endpoint down is the loop's to wait out."""
    url = urlsplit(base_url)
    address = (url.hostname or "", url.port or (443 if url.scheme == "https" else 80))
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        try:
            with socket.create_connection(address, timeout=connect_s):
                return time.monotonic() - start
        except OSError:
            time.sleep(0.1)
    return None


def header_safe_key(key: str, source: str) -> str:
    """The key travels in an HTTP header: a pasted curly quote, space or newline would otherwise fail
    deep inside the HTTP library, in every sample, with an encoding error that says nothing of the key."""
    if key.isascii() and key.isprintable() and " " not in key:
        return key
    raise GdpvalError(f"{source} holds a character an HTTP header cannot carry (non-ASCII, a space or a control character): set it to the key alone")


def preflight(client: openai.OpenAI, model: str, timeout: float = PREFLIGHT_TIMEOUT_S) -> None:
    """List models once: an unreachable, stuck or failing endpoint or a rejected key fails here, not in
    every sample, with what actually happened."""
    where = str(client.base_url)
    try:
        listed = [m.id for m in client.with_options(timeout=timeout, max_retries=1).models.list()]
    except openai.AuthenticationError:
        raise GdpvalError(f"the model endpoint {where} rejected the API key (401): set OPENAI_API_KEY to a valid key") from None
    except openai.PermissionDeniedError:
        raise GdpvalError(f"the model endpoint {where} refused access (403): check the API key's permissions") from None
    except openai.APITimeoutError as exc:
        raise GdpvalError(f"the model endpoint {where} {_timed_out(exc, timeout)}: is the server overloaded or stuck?") from None
    except openai.APIConnectionError as exc:
        raise GdpvalError(f"cannot reach the model endpoint {where} ({_connection_problem(exc)}): check --base-url and that the server is running") from None
    except openai.APIStatusError as exc:
        if exc.status_code < 500:
            return  # some OpenAI-compatible servers have no /models; the first sample will tell
        raise GdpvalError(
            f"the model endpoint {where} is up but answered HTTP {exc.status_code} ({_short_body(exc.response.text)}): "
            "wait until it is ready (still loading a model?) or check its log"
        ) from None
    if listed and model not in listed:
        raise GdpvalError(f"model {model!r} is not served at {where}; it offers: {', '.join(sorted(listed)[:20])}")


def _causes(exc: BaseException):
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        yield cause
        cause = cause.__cause__ or cause.__context__


def _timed_out(exc: openai.APITimeoutError, timeout: float) -> str:
    """Whether the connection or the answer did not come (the client tries twice)."""
    if any(type(cause).__name__ == "ConnectTimeout" for cause in _causes(exc)):
        return f"did not accept a connection: timed out after {timeout:g} s, twice"
    return f"accepted the connection but did not answer: timed out after {timeout:g} s, twice"


def _connection_problem(exc: openai.APIConnectionError) -> str:
    """'connection refused', else the innermost cause the HTTP library gave."""
    causes = list(_causes(exc))
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return "connection refused"
    return str(causes[-1]) or type(causes[-1]).__name__


def _short_body(text: str) -> str:
    """The body on one line, cut to BODY_SHOWN characters."""
    flat = " ".join(text.split())
    if not flat:
        return "empty body"
    return flat if len(flat) <= BODY_SHOWN else flat[: BODY_SHOWN - 1] + "…"
