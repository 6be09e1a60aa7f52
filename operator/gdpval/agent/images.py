"""The `view` tool's side of the conversation: what a viewer gives back and how its pictures reach the model.

Chat completions carry pictures only in user messages, so the tool's result is text and the pictures
follow, after every tool result of the turn, in one user message of image parts (PNG data URLs).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol

IMAGES_INTRO = "The pictures the view tool made, in the order of the calls:"
IMAGE_TOKENS = 1_000  # what a context estimate counts per picture (a 1024-pixel page costs OpenAI about 765)
DATA_URL = "data:image/png;base64,"


@dataclass(frozen=True)
class Looked:
    """One `view` call's outcome: the tool result the model reads, and the PNG pictures that follow it."""

    text: str
    images: list[bytes] = field(default_factory=list)


class Viewer(Protocol):
    def view(self, path: str, timeout: float) -> Looked: ...


def images_message(pictures: list[tuple[str, bytes]]) -> dict[str, Any] | None:
    """One user message with each (file, PNG) as a labelled image part; None when there are none."""
    if not pictures:
        return None
    parts: list[dict[str, Any]] = [{"type": "text", "text": IMAGES_INTRO}]
    for index, (name, png) in enumerate(pictures, 1):
        parts.append({"type": "text", "text": f"{index}. {name}"})
        parts.append({"type": "image_url", "image_url": {"url": DATA_URL + base64.b64encode(png).decode("ascii")}})
    return {"role": "user", "content": parts}


def is_images_message(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, list) and any(_is_image(part) for part in content)


def without_pixels(message: dict[str, Any]) -> dict[str, Any]:
    """The message with each picture's data replaced by a short stand-in: for estimates and transcripts."""
    if not is_images_message(message):
        return message
    return {**message, "content": [_stand_in(part) if _is_image(part) else part for part in message["content"]]}


def _is_image(part: object) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def _stand_in(part: dict[str, Any]) -> dict[str, Any]:
    url = str((part.get("image_url") or {}).get("url", ""))
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return {"type": "image_url", "image_url": {"url": f"[image sha256:{digest}, {len(url)} characters]"}}
