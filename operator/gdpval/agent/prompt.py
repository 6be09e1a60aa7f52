"""What the model is told. The footer lines are stable: tools and tests parse them."""

from __future__ import annotations

SYSTEM_PROMPT = (
    "You are a capable professional completing a realistic work assignment on a Linux computer. "
    "You have two tools: `bash` runs a shell command and `python_exec` runs a Python 3 program; "
    "both start in your working directory and show you the combined output and exit code. "
    "Inspect the reference files you are given, do the work carefully, and produce the files the "
    "assignment asks for in the formats it names. Nothing is installed at your request and there "
    "may be no network access. When you have finished, reply with a brief summary and call no tool."
)


def task_message(prompt: str, workspace: str, reference_root: str, references: list[str]) -> str:
    """The task prompt followed by where to work, where to save, and the reference file paths."""
    lines = [
        prompt.rstrip(),
        "",
        "---",
        f"Working directory: {workspace}",
        f"Deliverables folder: {workspace}/deliverable_files",
    ]
    if references:
        lines.append(f"Reference files (read-only), under {reference_root}:")
        lines.extend(f"- {path}" for path in references)
    else:
        lines.append("Reference files: none")
    lines += [
        "Save every file the task asks for in the deliverables folder; files elsewhere are not collected.",
        "When the work is done, answer with a short summary and no tool call.",
    ]
    return "\n".join(lines)
