"""Grading readiness: whether what a sample left is what a grader can open and asked for (pure, no model call).

A sample is grading-ready when it left at least one deliverable file, every file opens in the
renderer (the full runtime's LibreOffice where it is unpacked), none is empty, and every file type
its prompt asks for was made. Substituted fonts are reported beside it, not counted against it: the
grader still sees the file, in other letters. `gdpval check` fills these records
(gdpval.render.check); this module only decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath

from pydantic import BaseModel, Field

from gdpval.storage import NotFound, Storage, layout

GRADING_READY_DEFINITION = (
    "grading_ready = the share of this package's samples whose committed attempt left at least one deliverable file, "
    "every file non-empty and opening in the renderer (LibreOffice of the full runtime where unpacked), and a file of "
    "each type the prompt asks for (a heuristic over the prompt's words); `gdpval check` decides it, no model is called."
)
GRADING_TEXT_ONLY = (
    "grading_ready was checked text only (no LibreOffice where `gdpval check` ran): pages, sheets and slides were not counted "
    "and fonts not checked; give the run the full sandbox image (or unpack the full runtime) for the check a judge's renderer makes"
)

# The words by which a prompt asks for a file of a type, by the extension it would have.
ASKED_TYPES: dict[str, tuple[str, ...]] = {
    "xlsx": ("excel", "spreadsheet", "workbook", "xlsx"),
    "docx": ("word document", "word file", "word format", "docx"),
    "pptx": ("powerpoint", "slide deck", "pptx"),
    "pdf": ("pdf",),
    "csv": ("csv",),
    "png": ("png",),
    "wav": ("wav",),
    "mp4": ("mp4",),
    "mp3": ("mp3",),
    "md": ("markdown",),
}
# What a produced file may be called and still count as the asked type.
ACCEPTED: dict[str, frozenset[str]] = {
    "xlsx": frozenset({"xlsx", "xlsm", "xls", "ods"}),
    "docx": frozenset({"docx", "doc", "odt"}),
    "pptx": frozenset({"pptx", "ppt", "odp"}),
    "md": frozenset({"md", "markdown"}),
}
ALL_SUFFIXES = "|".join(sorted({w for words in ASKED_TYPES.values() for w in words if w.isalnum()}))
# A file name the prompt quotes ("logos.mp4", "INPUT 2 ... .xlsx"): a word character right before the dot.
NAMED_FILE = re.compile(rf"[\w)\]-]\.(?:{ALL_SUFFIXES}|doc|xls|ppt|jpe?g|zip|step|txt)\b", re.IGNORECASE)
# A type word that describes what was given, not what to make: "the attached spreadsheet", "reference PDF".
GIVEN = r"(?:attached|enclosed|accompanying|reference|referenced|supplied|included|provided|existing|original)\s+(?:(?!in\b|as\b)\w+\s+){0,2}"


def asked_types(prompt: str, references: Iterable[str] = ()) -> list[str]:
    """Extensions of the files a prompt asks for, by its words; names of files it was given, quoted file
    names, and types it says were attached are left out (a heuristic, reported as such)."""
    text = prompt
    for reference in references:
        name = PurePosixPath(reference).name
        stem = PurePosixPath(name).stem
        text = text.replace(name, " ").replace(stem, " ") if len(stem) >= 5 else text.replace(name, " ")
    text = NAMED_FILE.sub(" ", text).lower()
    asked = []
    for ext, words in ASKED_TYPES.items():
        for word in words:
            mentions = re.finditer(rf"(?<![a-z]){re.escape(word)}(?![a-z])", text)
            given = {m.end() for m in re.finditer(rf"{GIVEN}(?<![a-z]){re.escape(word)}(?![a-z])", text)}
            if any(m.end() not in given for m in mentions):
                asked.append(ext)
                break
    return asked


def extension(path: str) -> str:
    return PurePosixPath(path).suffix.lower().lstrip(".")


def missing_types(asked: Iterable[str], files: Iterable[str]) -> list[str]:
    """The asked types no file has (an .xls counts for an asked .xlsx, and so on)."""
    made = {extension(f) for f in files}
    return [ext for ext in asked if not made & ACCEPTED.get(ext, frozenset({ext}))]


class FileCheck(BaseModel):
    """One deliverable as the renderer opened it."""

    name: str
    bytes: int
    kind: str
    opens: bool
    unrenderable: str = ""
    pages: int | None = None
    sheets: int | None = None
    slides: int | None = None
    fonts_missing: list[str] | None = None  # None: not checked (no LibreOffice)


class SampleCheck(BaseModel):
    sample_id: str
    task_id: str
    attempt: int | None = None
    files: list[FileCheck] = Field(default_factory=list)
    asked: list[str] = Field(default_factory=list)
    missing_types: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    fonts_substituted: list[str] = Field(default_factory=list)
    grading_ready: bool = False


class CheckResults(BaseModel):
    """runs/<run>/check.json: every sample's readiness and the share that is ready."""

    run_name: str
    renderer: str
    text_only: bool = False  # rendered without LibreOffice (no full runtime here, no full image in the pod): nothing counted, no fonts checked
    samples: list[SampleCheck]
    grading_ready: float
    grading_ready_definition: str = GRADING_READY_DEFINITION


def sample_check(sample_id: str, task_id: str, attempt: int | None, prompt: str, references: list[str], files: list[FileCheck]) -> SampleCheck:
    """Decide one sample's readiness from its opened files and its prompt."""
    asked = asked_types(prompt, references)
    missing = missing_types(asked, [f.name for f in files]) if attempt is not None else asked
    problems = [] if attempt is not None else ["no committed attempt"]
    if attempt is not None and not files:
        problems.append("no deliverable file")
    problems += [f"{f.name}: empty (0 bytes)" for f in files if f.bytes == 0]
    problems += [f"{f.name}: does not open: {f.unrenderable}" for f in files if f.bytes and not f.opens]
    problems += [f"asked for a .{ext} file and none was made" for ext in missing]
    fonts = sorted({font for f in files for font in f.fonts_missing or []})
    return SampleCheck(
        sample_id=sample_id,
        task_id=task_id,
        attempt=attempt,
        files=files,
        asked=asked,
        missing_types=missing,
        problems=problems,
        fonts_substituted=fonts,
        grading_ready=not problems,
    )


def share(checks: Iterable[SampleCheck]) -> float:
    checks = list(checks)
    return round(sum(c.grading_ready for c in checks) / len(checks), 4) if checks else 0.0


def current_share(check: CheckResults | None, committed: dict[str, int | None]) -> float | None:
    """The grading-ready share of these samples (sample id -> committed attempt), or None unless check.json
    holds every one of them at that attempt (never checked, or checked before a sample was committed again)."""
    if check is None:
        return None
    by_sample = {c.sample_id: c for c in check.samples}
    found = [by_sample.get(sample) for sample in committed]
    if any(c is None or c.attempt != committed[c.sample_id] for c in found):
        return None
    return share(c for c in found if c is not None)


def load_check(storage: Storage, run: str) -> CheckResults | None:
    """The run's check.json, or None when `gdpval check` has not run on it (or left it unreadable)."""
    try:
        return CheckResults.model_validate_json(storage.get_bytes(layout.check_results(run)))
    except (NotFound, ValueError):
        return None
