"""The chart ships exactly the generated CRD (crds/ at the repository root), unchanged but for metadata."""

from __future__ import annotations

from pathlib import Path

import yaml

from support.chart import CHART, of_kind, render

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "crds"
COPY = CHART / "files" / "crds"


def test_chart_copy_matches_generated_crds() -> None:
    generated = {p.name: p.read_bytes() for p in GENERATED.glob("*.yaml")}
    copied = {p.name: p.read_bytes() for p in COPY.glob("*.yaml")}
    assert generated, "crds/ is empty"
    assert copied.keys() == generated.keys(), "run charts/gdpval/hack/sync-crds.sh"
    for name in generated:
        assert copied[name] == generated[name], f"{name} differs from crds/: run charts/gdpval/hack/sync-crds.sh"


def test_rendered_crd_is_the_generated_one() -> None:
    rendered = {d["metadata"]["name"]: d for d in of_kind(render(), "CustomResourceDefinition")}
    for path in GENERATED.glob("*.yaml"):
        source = yaml.safe_load(path.read_text())
        got = rendered[source["metadata"]["name"]]
        assert got["spec"] == source["spec"]
        assert got["apiVersion"] == source["apiVersion"]
        for key, value in (source["metadata"].get("labels") or {}).items():
            assert got["metadata"]["labels"][key] == value
