"""The task message's footer lines are a contract with the scripted model and with users."""

from gdpval.agent.prompt import task_message


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
