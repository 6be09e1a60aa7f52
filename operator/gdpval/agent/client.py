"""The OpenAI client and a pre-flight check that catches endpoint mistakes before any sample runs."""

from __future__ import annotations

import os

import openai

from gdpval.errors import GdpvalError

PLACEHOLDER_KEY = "not-needed"  # local servers often accept any key; the client insists on one


def make_client(base_url: str | None, api_key: str | None = None) -> openai.OpenAI:
    """Retries are ours (the loop records each), so the client's own are off."""
    return openai.OpenAI(
        base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY,
        max_retries=0,
    )


def preflight(client: openai.OpenAI, model: str) -> None:
    """List models once: an unreachable endpoint or a rejected key fails here, not in every sample."""
    where = str(client.base_url)
    try:
        listed = [m.id for m in client.with_options(timeout=15, max_retries=1).models.list()]
    except openai.AuthenticationError:
        raise GdpvalError(f"the model endpoint {where} rejected the API key (401): set OPENAI_API_KEY to a valid key") from None
    except openai.PermissionDeniedError:
        raise GdpvalError(f"the model endpoint {where} refused access (403): check the API key's permissions") from None
    except openai.APIConnectionError:
        raise GdpvalError(f"cannot reach the model endpoint {where}: check --base-url and that the server is running") from None
    except openai.APIStatusError:
        return  # some OpenAI-compatible servers have no /models; the first sample will tell
    if listed and model not in listed:
        raise GdpvalError(f"model {model!r} is not served at {where}; it offers: {', '.join(sorted(listed)[:20])}")
