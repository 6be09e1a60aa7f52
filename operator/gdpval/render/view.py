"""One file as a judge or the readiness check sees it: text, PNG pages, facts, or why it could not be rendered."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from gdpval.render.worker import IMAGE_SIDE, IMAGES_PER_FILE, TEXT_PER_FILE

__all__ = ["IMAGE_SIDE", "IMAGES_PER_FILE", "TEXT_PER_FILE", "Facts", "View", "bounded"]


class Facts(BaseModel):
    """What the renderer counted; None where it could not tell (no LibreOffice, not that kind of file)."""

    model_config = ConfigDict(extra="ignore")

    pages: int | None = Field(default=None, ge=0)
    sheets: int | None = Field(default=None, ge=0)
    slides: int | None = Field(default=None, ge=0)
    fonts_named: list[str] = Field(default_factory=list, max_length=1000)
    fonts_missing: list[str] | None = Field(default=None, max_length=1000)  # None: not checked (no LibreOffice)
    office: str = ""  # why Office pages are missing, when they are
    computed_by: str = ""


@dataclass
class View:
    """One file as the judge sees it: a text block and PNG images; `unrenderable` says why it could not be
    rendered (then text says so too, and there are no images): never a stub passed on as the file."""

    name: str
    kind: str
    text: str
    images: list[bytes] = field(default_factory=list)
    unrenderable: str = ""
    facts: Facts = field(default_factory=Facts)
    renderer: str = ""

    @classmethod
    def refused(cls, name: str, kind: str, reason: str, renderer: str = "") -> View:
        return cls(name, kind, f"[the file could not be rendered: {reason}]", unrenderable=reason, renderer=renderer)

    @property
    def summary(self) -> str:
        if self.unrenderable:
            return f"{self.name}: {self.kind}, unrenderable: {self.unrenderable}"
        pictures = f", {len(self.images)} image(s)" if self.images else ""
        return f"{self.name}: {self.kind}, {len(self.text)} characters{pictures}"


def bounded(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not shown]"
