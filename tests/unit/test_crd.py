"""The committed CRD matches the models, and its schema is structural and says what it checks."""

from __future__ import annotations

import yaml

from gdpval.api import __main__ as writer
from gdpval.api import crd
from gdpval.api import v1alpha1 as api
from gdpval.settings import DEFAULT_DATASET, PINNED_SECTIONS


def _schema():
    return crd.crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def test_committed_crd_is_up_to_date():
    assert writer.main(["--check"]) == 0, "crds/ is stale: run `python -m gdpval.api`"


def test_check_fails_on_a_stale_file(tmp_path, capsys):
    (tmp_path / crd.CRD_FILE).write_text("stale")
    assert writer.main(["--check", "--dir", str(tmp_path)]) == 1
    assert writer.main(["--dir", str(tmp_path)]) == 0
    assert writer.main(["--check", "--dir", str(tmp_path)]) == 0


def test_schema_is_structural():
    for path, node in _walk(_schema()):
        if isinstance(node, dict):
            assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
            if "x-kubernetes-int-or-string" in node:
                assert "type" not in node, path
            elif "properties" in node or "additionalProperties" in node:
                assert node.get("type") == "object", path


def test_names_and_subresources():
    manifest = yaml.safe_load(crd.render_crd())
    spec = manifest["spec"]
    assert manifest["metadata"]["name"] == "gdpvalruns.gdpval.io"
    assert spec["names"]["kind"] == "GdpvalRun" and spec["names"]["shortNames"] == api.SHORT_NAMES
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Progress"] == ".status.progress" and columns["Age"] == ".metadata.creationTimestamp"
    assert {"Succeeded", "Failed", "State"} <= set(columns)


def test_checks_the_server_can_do():
    spec = _schema()["properties"]["spec"]
    props = spec["properties"]
    assert set(spec["required"]) == {"model", "output"}
    assert props["parallelism"]["minimum"] == 1
    for field in (*PINNED_SECTIONS, "output"):
        rules = [r["rule"] for r in props[field]["x-kubernetes-validations"]]
        assert "self == oldSelf" in rules, field
    assert "s3://" in props["output"]["properties"]["url"]["x-kubernetes-validations"][0]["rule"]
    assert any("s3://" in r["rule"] for r in props["dataset"]["x-kubernetes-validations"]), "a cluster dataset is never a local folder"
    assert props["failureBudget"]["x-kubernetes-int-or-string"] is True
    assert props["model"]["properties"]["extraBody"]["x-kubernetes-preserve-unknown-fields"] is True


def test_strings_under_cel_rules_are_bounded():
    """CEL cost estimation rejects rules over unbounded strings; every such string has maxLength."""
    for path, node in _walk(_schema()):
        if isinstance(node, dict) and "x-kubernetes-validations" in node and node.get("type") == "string":
            assert "maxLength" in node, path


def test_defaults_round_trip_through_the_models():
    spec = api.GdpvalRunSpec.model_validate({"model": {"name": "m"}, "output": {"url": "s3://b/p"}})
    assert spec.parallelism == 4 and spec.dataset.id == DEFAULT_DATASET and spec.failure_budget == "10%"
    dumped = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["model"] == {"name": "m", "tokenLimitParam": "max_tokens", "stream": False} and "baseURL" not in dumped["model"]
    assert api.GdpvalRunSpec.model_validate(dumped) == spec
