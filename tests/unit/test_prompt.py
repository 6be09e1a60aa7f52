"""The task message's footer lines are a contract with the scripted model and with users; the
prompt settings choose between them and another harness's conventions."""

from gdpval.agent.prompt import SYSTEM_PROMPT, compose, task_message
from gdpval.settings import PromptSettings


def test_message_lists_workspace_deliverables_and_references():
    text = task_message("Do the audit.\n", "/workspace", "/reference_files", ["/reference_files/ab/Pop (4) & co.xlsx"])
    lines = text.splitlines()
    assert lines[0] == "Do the audit."
    assert "Working directory: /workspace" in lines
    assert "Deliverables folder: /workspace/deliverable_files" in lines
    assert "Reference files (read-only), under /reference_files:" in lines
    assert "- /reference_files/ab/Pop (4) & co.xlsx" in lines


def test_message_without_references_says_none():
    text = task_message("Écrivez une lettre.", "/w", "/r", [])
    assert "Reference files: none" in text.splitlines()
    assert text.startswith("Écrivez une lettre.")


def test_default_conventions_are_ours():
    system, user = compose(PromptSettings(), "Do the audit.", "/workspace", "/reference_files", ["/reference_files/ab/x.pdf"])
    assert system == SYSTEM_PROMPT and SYSTEM_PROMPT.endswith("reply with a brief summary and call no tool.")
    assert user == task_message("Do the audit.", "/workspace", "/reference_files", ["/reference_files/ab/x.pdf"])
    assert user.endswith("answer with a short summary and no tool call.")


def test_submit_finish_is_asked_for_in_both_default_messages():
    system, user = compose(PromptSettings(finish="submit"), "Do it.", "/w", "/r", [])
    assert "call `submit`" in system and "call no tool" not in system
    assert user.splitlines()[-1] == "When the work is done, call submit with a short summary as the answer."


def test_system_prompt_none_or_own_text():
    assert compose(PromptSettings(system="none"), "Do it.", "/w", "/r", [])[0] is None
    assert compose(PromptSettings(system="Be brief. {not a placeholder}"), "Do it.", "/w", "/r", [])[0] == "Be brief. {not a placeholder}"


def test_template_is_filled_with_the_task_and_one_reference_per_line():
    template = "{prompt}\n\nFiles:\n{references}\n\nWork in {workspace}; save to {deliverables}. {{literal}}"
    refs = ["/r/a1/Budget {2024}.xlsx", "/r/b2/notes.txt"]
    _, user = compose(PromptSettings(template=template), "Plan the budget.\n", "/workspace", "/r", refs)
    assert user == (
        "Plan the budget.\n\nFiles:\n/r/a1/Budget {2024}.xlsx\n/r/b2/notes.txt\n\nWork in /workspace; save to /workspace/deliverable_files. {literal}"
    )
    assert compose(PromptSettings(template="{prompt}|{references}|"), "x", "/w", "/r", [])[1] == "x||"
