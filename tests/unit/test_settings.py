"""One settings model, three surfaces: `gdpval run`'s flags, the GdpvalRun CRD and run.json (plus the
prepare Job's JSON). A setting present in one and missing in another fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from pydantic import ValidationError

from gdpval import cli
from gdpval.api import crd
from gdpval.api import v1alpha1 as api
from gdpval.controller.pure import manifests
from gdpval.dataset.models import DatasetRef
from gdpval.errors import GdpvalError
from gdpval.manifest import RunRecord
from gdpval.runner.prepare import describe_invalid, settings_for
from gdpval.settings import LOCAL_ONLY, RunSettings, flag_specs, leaves, wire_path

LEGACY = Path(__file__).resolve().parents[1] / "data/legacy-run-0.1.0/runs/demo/run.json"
SPECS = flag_specs()
WRITTEN = [spec for spec in SPECS if spec.path not in LOCAL_ONLY]
SPEC = api.GdpvalRunSpec.model_validate({"model": {"name": "m"}, "output": {"url": "s3://b/p"}})


def _spec_schema(model=api.GdpvalRunSpec) -> dict:
    return crd.structural(model)


def _node(schema: dict, path: tuple[str, ...]) -> dict:
    for part in path:
        schema = schema["properties"][part]
    return schema


def _schema_leaves(schema: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of the schema's leaf fields (objects without declared properties are leaves)."""
    if "properties" not in schema:
        return [prefix]
    return [leaf for name, sub in schema["properties"].items() for leaf in _schema_leaves(sub, (*prefix, name))]


def _not_settings(model=api.GdpvalRunSpec) -> list[str]:
    """Spec leaves that are neither a run setting nor listed (with a reason) as cluster-only."""
    settings = {wire_path(s.path) for s in SPECS}
    out = []
    for path in _schema_leaves(_spec_schema(model)):
        dotted = ".".join(path)
        if path not in settings and not any(dotted == c or dotted.startswith(c + ".") for c in api.CLUSTER_ONLY):
            out.append(dotted)
    return out


def _run_options() -> dict[str, set[str]]:
    command = typer.main.get_command(cli.app).commands["run"]
    return {p.name: set(p.opts) | set(p.secondary_opts) for p in command.params}


def test_every_setting_is_a_flag_of_gdpval_run_with_its_description():
    options = _run_options()
    command = typer.main.get_command(cli.app).commands["run"]
    helps = {p.name: p.help for p in command.params}
    for spec in SPECS:
        names = {n for name in spec.names for n in name.split("/")}
        assert options.get(spec.param) == names, spec.path
        assert helps[spec.param] == spec.help and spec.help, spec.path


def test_flags_are_unique():
    names = [n for spec in SPECS for name in spec.names for n in name.split("/")]
    assert len(names) == len(set(names))


def test_every_setting_is_in_the_crd_with_its_default_and_description():
    schema = _spec_schema()
    for spec in WRITTEN:
        path = wire_path(spec.path)
        node, parent = _node(schema, path), _node(schema, path[:-1])
        assert node.get("description") == spec.help, spec.path
        if "default" in node or (spec.default is not None and not spec.multiple):
            required = path[-1] in parent.get("required", ())  # e.g. output.url: no local default in a cluster
            assert node.get("default") == spec.default or required, spec.path


def test_every_crd_spec_field_is_a_setting_or_cluster_only():
    assert _not_settings() == []
    listed = {".".join(p) for p in _schema_leaves(_spec_schema())}
    for name in api.CLUSTER_ONLY:
        assert any(leaf == name or leaf.startswith(name + ".") for leaf in listed), f"{name} is not in the spec any more"


def test_a_cluster_field_without_a_flag_is_caught():
    class Extended(api.GdpvalRunSpec):
        brand_new: int = 0

    assert _not_settings(Extended) == ["brandNew"]


def test_run_json_and_the_prepare_job_carry_every_setting():
    record = RunRecord(run_name="r", settings=RunSettings.of(SPEC), dataset=DatasetRef(source="s3", location="s3://d", revision="x"))
    stored = json.loads(record.dump())["settings"]
    sent = json.loads(manifests.settings_json(SPEC))
    for spec in WRITTEN:
        for document in (stored, sent):
            node = document
            for part in wire_path(spec.path):
                node = node[part]
    assert RunRecord.model_validate_json(record.dump()) == record


def test_a_resume_keeps_the_stored_settings_and_names_changed_pinned_ones():
    stored = RunRecord(
        run_name="r",
        dataset=DatasetRef(source="local", location="/d", revision="rev1"),
        settings=RunSettings.model_validate({"model": {"name": "m", "baseURL": "http://a:1/v1"}, "agent": {"maxSteps": 40}}),
    )
    kept = settings_for(stored, {("model", "base_url"): "http://b:2/v1", ("parallelism",): 9})
    assert kept.agent.max_steps == 40 and kept.model.base_url == "http://b:2/v1" and kept.parallelism == 9
    with pytest.raises(GdpvalError) as refused:
        settings_for(stored, {("agent", "max_steps"): 41, ("dataset", "revision"): "rev2"})
    message = str(refused.value)
    assert "--max-steps 41 (the run has 40)" in message and "--revision 'rev2' (the run has 'rev1')" in message
    with pytest.raises(GdpvalError, match=r"spec\.agent\.maxSteps 41"):
        settings_for(stored, {("agent", "max_steps"): 41}, flags=False)


def test_invalid_settings_name_the_flag_or_the_spec_path():
    with pytest.raises(ValidationError) as caught:
        RunSettings.model_validate({"model": {"name": "m", "baseURL": "ftp://x"}, "deliverables": {"maxFileMiB": 0}})
    assert describe_invalid(caught.value, flags=True).startswith("invalid settings: --base-url: String should match")
    assert "--max-deliverable-mb: Input should be greater than or equal to 1" in describe_invalid(caught.value, flags=True)
    assert "spec.deliverables.maxFileMiB" in describe_invalid(caught.value, flags=False)


def test_a_run_json_written_by_0_1_0_is_upgraded_on_read():
    record = RunRecord.model_validate_json(LEGACY.read_text())
    settings = record.settings
    assert record.run_name == "demo" and record.dataset.revision == "93fa0f88cb37"
    assert settings.model.name == "scripted" and settings.dataset.id == record.dataset.location
    assert settings.selection.limit == 2 and settings.agent.max_steps == 250 and settings.agent.command_timeout_seconds == 180
    assert settings.agent.sample_deadline_seconds is None  # 0.1.0 had no deadline by default: kept
    assert settings.deliverables.max_file_mib == 200 and settings.deliverables.max_files == 200
    assert leaves(RunRecord.model_validate_json(record.dump()).settings) == leaves(settings)


def test_every_spec_field_is_explained():
    """`kubectl explain gdpvalrun.spec...` has a description for every field, settings and cluster-only alike."""

    def unexplained(node: dict, path: str) -> list[str]:
        own = [] if node.get("description") else [path]
        return own + [p for name, sub in (node.get("properties") or {}).items() for p in unexplained(sub, f"{path}.{name}")]

    assert unexplained(_spec_schema(), "spec") == []


def test_local_only_settings_are_flags_but_never_written():
    """A local-only setting is a flag of `gdpval run`, absent from the CRD (its defaults included),
    run.json and the prepare Job's input; a new one needs its reason listed."""
    assert LOCAL_ONLY and all(reason for reason in LOCAL_ONLY.values())
    options = _run_options()
    crd_text = json.dumps(_spec_schema())
    settings = RunSettings.model_validate({"model": {"name": "m"}, "sandbox": {"runtime": "/opt/root"}})
    stored = json.loads(RunRecord(run_name="r", settings=settings, dataset=DatasetRef(source="s3", location="s3://d", revision="x")).dump())
    for path in LOCAL_ONLY:
        spec = next(s for s in SPECS if s.path == path)
        assert spec.param in options
        node: dict = stored["settings"]
        for part in wire_path(path)[:-1]:
            node = node[part]
        assert wire_path(path)[-1] not in node
        assert f'"{wire_path(path)[-1]}"' not in crd_text
    assert "runtime" not in json.loads(manifests.settings_json(SPEC))["sandbox"]
