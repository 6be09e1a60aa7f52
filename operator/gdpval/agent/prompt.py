"""What the model is told. The footer lines are stable: tools and tests parse them.

`prompt.system`, `prompt.template` and `prompt.finish` choose between our own conventions (the
defaults) and another harness's; `compose` turns them into the conversation's opening messages.
"""

from __future__ import annotations

from gdpval.settings import PromptSettings

_SYSTEM_BODY = (
    "You are a capable professional completing a realistic work assignment on a Linux computer. "
    "You have two tools: `bash` runs a shell command and `python_exec` runs a Python 3 program; "
    "both start in your working directory and show you the combined output and exit code. "
    "Inspect the reference files you are given, do the work carefully, and produce the files the "
    "assignment asks for in the formats it names. Nothing is installed at your request and there "
    "may be no network access. "
)
# How each finish is asked for: in the system prompt, and in the task message's last line.
SYSTEM_CLOSING = {
    "answer": "When you have finished, reply with a brief summary and call no tool.",
    "submit": "When you have finished, call `submit` with a brief summary as its answer; that ends the assignment.",
}
TASK_CLOSING = {
    "answer": "When the work is done, answer with a short summary and no tool call.",
    "submit": "When the work is done, call submit with a short summary as the answer.",
}
SYSTEM_PROMPT = _SYSTEM_BODY + SYSTEM_CLOSING["answer"]
NUDGE = "You called no tool. Carry on with the tools, or call submit with your final answer if the work is done."
CUT_OFF = (
    "Your last reply was cut off by the token limit before it ended, so it is not a final answer. "
    "Carry on from where it stopped, in shorter replies (a long file can be written in several calls)."
)
ELIDED = "[output elided by the harness to keep the conversation short; run the command again if you need it]"


def deliverables_dir(workspace: str) -> str:
    return f"{workspace}/deliverable_files"


def task_message(prompt: str, workspace: str, reference_root: str, references: list[str], finish: str = "answer") -> str:
    """The task prompt followed by where to work, where to save, and the reference file paths."""
    lines = [
        prompt.rstrip(),
        "",
        "---",
        f"Working directory: {workspace}",
        f"Deliverables folder: {deliverables_dir(workspace)}",
    ]
    if references:
        lines.append(f"Reference files (read-only), under {reference_root}:")
        lines.extend(f"- {path}" for path in references)
    else:
        lines.append("Reference files: none")
    lines += [
        "Save every file the task asks for in the deliverables folder; files elsewhere are not collected.",
        TASK_CLOSING[finish],
    ]
    return "\n".join(lines)


def fill_template(template: str, prompt: str, workspace: str, references: list[str]) -> str:
    """A user template (checked by PromptSettings) filled in; {references} is one path per line."""
    return template.format(prompt=prompt.rstrip(), references="\n".join(references), workspace=workspace, deliverables=deliverables_dir(workspace))


def system_message(settings: PromptSettings) -> str | None:
    """Ours (worded for the run's finish), none at all, or the run's own text."""
    if settings.system == "default":
        return _SYSTEM_BODY + SYSTEM_CLOSING[settings.finish]
    return None if settings.system == "none" else settings.system


def compose(settings: PromptSettings, prompt: str, workspace: str, reference_root: str, references: list[str]) -> tuple[str | None, str]:
    """The opening of one sample's conversation: (system message or None, user message)."""
    if settings.template == "default":
        user = task_message(prompt, workspace, reference_root, references, settings.finish)
    else:
        user = fill_template(settings.template, prompt, workspace, references)
    return system_message(settings), user
