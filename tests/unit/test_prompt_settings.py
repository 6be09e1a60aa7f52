"""prompt.template is checked where the settings are parsed, so the CLI, a GdpvalRun spec and run.json
all refuse a template that cannot be filled, in one line that names the setting as the user wrote it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gdpval.api.v1alpha1 import GdpvalRunSpec
from gdpval.runner.prepare import describe_invalid
from gdpval.settings import PromptSettings, RunSettings

SPEC = {"model": {"name": "m"}, "output": {"url": "s3://bucket/prefix"}}


def problem(template: str) -> str:
    with pytest.raises(ValidationError) as caught:
        PromptSettings(template=template)
    return caught.value.errors()[0]["msg"]


@pytest.mark.parametrize(
    "template",
    [
        "default",
        "{prompt}",
        "{prompt}\n\nReference files:\n{references}\n\nWork in {workspace}, save to {deliverables}.",
        "{{literal braces}} {prompt}",
    ],
)
def test_fillable_templates_pass(template):
    assert PromptSettings(template=template).template == template


@pytest.mark.parametrize(
    "template, says",
    [
        ("{prompt} {references_list}", "unknown placeholder {references_list}; a template may use {prompt}, {references}, {workspace}, {deliverables}"),
        ("{prompt} {}", "unknown placeholder {}"),
        ("{prompt} {0}", "unknown placeholder {0}"),
        ("{prompt.title}", "unknown placeholder {prompt.title}"),
        ("{prompt:>{workspace}}", "unknown placeholder {prompt:>{workspace}}"),
        ("{prompt!r}", "unknown placeholder {prompt!r}"),
        ("{prompt", "not a valid template (expected '}' before end of string); write {{ and }} for literal braces"),
        ("{prompt} }", "not a valid template (Single '}' encountered in format string)"),
        ("Files: {references}", "the template has no {prompt}"),
    ],
)
def test_unfillable_templates_are_refused_with_the_reason(template, says):
    assert says in problem(template)


def test_the_cli_names_the_flag_and_the_operator_the_spec_field():
    with pytest.raises(ValidationError) as caught:
        RunSettings.model_validate({"model": {"name": "m"}, "prompt": {"template": "{task}"}})
    assert describe_invalid(caught.value, flags=True).startswith("invalid settings: --prompt-template: Value error, unknown placeholder {task};")
    assert describe_invalid(caught.value, flags=False).startswith("invalid settings: spec.prompt.template: Value error, unknown placeholder")
    assert "\n" not in describe_invalid(caught.value, flags=True)


def test_a_gdpvalrun_spec_and_run_json_are_checked_alike():
    with pytest.raises(ValidationError) as caught:
        GdpvalRunSpec.model_validate({**SPEC, "prompt": {"template": "{prompt"}})
    assert [e["loc"] for e in caught.value.errors()] == [("prompt", "template")]
    with pytest.raises(ValidationError):
        RunSettings.model_validate_json('{"model": {"name": "m"}, "prompt": {"template": "no task here"}}')
