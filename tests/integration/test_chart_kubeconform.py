"""`helm template` output, examples/ and the health-check samples pass `kubeconform -strict`.

No schema registry is reachable here, so the schemas are made locally:
- built-in kinds from the OpenAPI document of the Kubernetes release the project pins
  (hack/versions.sh K8S_VERSION), taken from the k8s.io/kubernetes Go module;
- GdpvalRun from the chart's CRD, so custom resources are checked against what the API server
  enforces (CEL rules aside).
Both are made "strict" the way kubeconform's own strict schemas are: objects with known
properties refuse unknown ones.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gdpval.api.v1alpha1 import GdpvalPoolSpec, GdpvalRunSpec, PodDefaults
from gdpval.controller.pure import manifests as m
from gdpval.controller.pure import pool
from support.chart import CHART, VARIANTS, render_text, require_tool

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HEALTH_SAMPLES = ROOT / "gitops" / "testdata" / "health"
# Kinds whose schema lives in another project's CRD; checked by the chart tests instead.
FOREIGN_KINDS = {"ServiceMonitor", "Application"}


def pinned(key: str) -> str:
    versions = (ROOT / "hack" / "versions.sh").read_text()
    return re.search(rf"^{key}=(\S+)", versions, flags=re.M).group(1)


def kubernetes_version() -> str:
    return pinned("K8S_VERSION")


def module_dir(module: str, version: str) -> Path:
    """A Go module's source from the module proxy (cached by the go command)."""
    go = require_tool("go")
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
    )
    assert proc.returncode == 0, proc.stderr
    return Path(json.loads(proc.stdout)["Dir"])


def swagger_path(version: str) -> Path:
    return module_dir("k8s.io/kubernetes", version) / "api" / "openapi-spec" / "swagger.json"


def flux_crds() -> list[dict]:
    """The CRDs of Flux's helm, source and kustomize controllers at the pinned versions."""
    crds = []
    for name in ("helm", "source", "kustomize"):
        folder = module_dir(f"github.com/fluxcd/{name}-controller", pinned(f"FLUX_{name.upper()}_CONTROLLER_VERSION")) / "config" / "crd" / "bases"
        crds += [yaml.safe_load(p.read_text()) for p in sorted(folder.glob("*.yaml"))]
    return crds


def kind_suffix(api_version: str) -> str:
    """kubeconform's file naming: apps/v1 -> -apps-v1, v1 -> -v1, gdpval.io/v1alpha1 -> -gdpval-v1alpha1."""
    group, _, version = api_version.rpartition("/")
    if not group:
        return f"-{version.lower()}"
    return f"-{group.split('.')[0].lower()}-{version.lower()}"


def _strict(schema: Any) -> Any:
    """Refuse unknown properties wherever properties are listed, as kubeconform's strict schemas do.

    Walks schema keywords only: a property may well be called `format` or `nullable`.
    """
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in ("properties", "definitions", "patternProperties"):
        if isinstance(out.get(key), dict):
            out[key] = {name: _strict(sub) for name, sub in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_strict(sub) for sub in out[key]]
    if out.get("format") == "int-or-string" or out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.pop("format", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
        for value in node.values():
            found |= _refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(_refs(n) for n in node)) if node else set()
    return set()


def builtin_schemas(swagger: dict, wanted: set[tuple[str, str]], out: Path) -> set[tuple[str, str]]:
    """Write one standalone schema per wanted (apiVersion, kind); return the ones found."""
    definitions = swagger["definitions"]
    # Quantities are written as numbers too (cpu: 1); the API server accepts both.
    definitions = {**definitions, "io.k8s.apimachinery.pkg.api.resource.Quantity": {"anyOf": [{"type": "string"}, {"type": "number"}]}}
    found = set()
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            if (api_version, gvk["kind"]) not in wanted:
                continue
            closure, todo = {}, [name]
            while todo:
                ref = todo.pop()
                if ref not in closure:
                    closure[ref] = definitions[ref]
                    todo += _refs(definitions[ref])
            doc = copy.deepcopy(definitions[name])
            doc["definitions"] = {k: copy.deepcopy(v) for k, v in closure.items()}
            (out / f"{gvk['kind'].lower()}{kind_suffix(api_version)}.json").write_text(json.dumps(_strict(doc)))
            found.add((api_version, gvk["kind"]))
    return found


def crd_schemas(crd: dict, out: Path) -> set[tuple[str, str]]:
    found = set()
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    for version in crd["spec"]["versions"]:
        schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
        schema["properties"]["apiVersion"] = {"type": "string", "enum": [f"{group}/{version['name']}"]}
        schema["properties"]["kind"] = {"type": "string", "enum": [kind]}
        (out / f"{kind.lower()}{kind_suffix(group + '/' + version['name'])}.json").write_text(json.dumps(_strict(schema)))
        found.add((f"{group}/{version['name']}", kind))
    return found


def documents(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


# Runs whose children the operator's builders make here: every default, and every pod setting in use.
OPERATOR_RUNS = {
    "network-off": {"model": {"name": "m", "baseURL": "https://models.example/v1"}, "output": {"url": "s3://b/p", "endpoint": "http://10.0.0.2:9000"}},
    "network-on": {
        "model": {"name": "m", "apiKeySecretRef": {"name": "key", "key": "k"}},
        "output": {"url": "s3://b/p", "credentialsSecret": {"name": "s3"}},
        "sandbox": {"network": True, "cpus": 0.5, "memoryMiB": 1024, "diskMiB": 2048},
        "pod": {"runtimeClassName": "gvisor", "resources": {"agent": {"limits": {"cpu": 2}}}, "volumes": {"references": "1Gi", "scratch": 268435456}},
    },
}


def operator_text(name: str) -> str:
    """The objects the operator creates for one run (its pure builders), as one YAML stream."""
    ctx = m.RunContext("demo", "ns", "uid-1", GdpvalRunSpec.model_validate(OPERATOR_RUNS[name]), "agent:1", "sandbox:1")
    objects = [
        m.sample_pod(ctx, "task-r0", 1),
        m.prepare_job(ctx),
        m.assemble_job(ctx),
        m.network_policy(ctx, {"models.example": ["192.0.2.1", "2001:db8::1"]}),
        m.token_secret(ctx, "token"),
        m.ledger_configmap(ctx, {}),
    ]
    spec = GdpvalPoolSpec.model_validate({"size": 2, "sandbox": ctx.spec.sandbox.model_dump()})
    warm = pool.pool_context("warm", "ns", "uid-2", spec, "agent:1", "sandbox:1", PodDefaults())
    pooled = pool.pooled_pod(warm, pool.shape_hash(warm), "abcd1234")
    objects += [pooled, pool.claim_secret(ctx, pool.parse_pooled(pooled), "claim-1", {"OPENAI_API_KEY": "k"})]
    return yaml.safe_dump_all(objects)


def input_names() -> list[str]:
    """Everything validated here: every rendered variant, what the operator builds, the examples, the health samples."""
    files = sorted(EXAMPLES.glob("*.yaml")) + sorted(p for p in HEALTH_SAMPLES.glob("*.yaml") if p.name != "expected.yaml")
    built = [f"operator[{name}]" for name in sorted(OPERATOR_RUNS)]
    return [f"chart[{name}]" for name in sorted(VARIANTS)] + built + [str(p.relative_to(ROOT)) for p in files]


def input_text(name: str) -> str:
    if name.startswith("chart["):
        return render_text(VARIANTS[name[len("chart[") : -1]])
    if name.startswith("operator["):
        return operator_text(name[len("operator[") : -1])
    return (ROOT / name).read_text()


@pytest.fixture(scope="module")
def schemas(tmp_path_factory) -> Path:
    require_tool("kubeconform")
    out = tmp_path_factory.mktemp("kubeconform-schemas")
    wanted = {(d["apiVersion"], d["kind"]) for name in input_names() for d in documents(input_text(name))}
    wanted = {w for w in wanted if w[1] not in FOREIGN_KINDS}
    found: set = set()
    for path in sorted((CHART / "files" / "crds").glob("*.yaml")):
        found |= crd_schemas(yaml.safe_load(path.read_text()), out)
    for flux in flux_crds():
        found |= crd_schemas(flux, out)
    swagger = json.loads(swagger_path(kubernetes_version()).read_text())
    found |= builtin_schemas(swagger, wanted - found, out)
    assert wanted <= found, f"no schema for {sorted(wanted - found)}"
    return out


def kubeconform(schemas: Path, text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            require_tool("kubeconform"),
            "-strict",
            "-summary",
            "-output",
            "text",
            "-schema-location",
            f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
            "-skip",
            ",".join(sorted(FOREIGN_KINDS)),
        ],
        input=text,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("name", input_names())
def test_kubeconform_strict(schemas: Path, name: str) -> None:
    text = input_text(name)
    proc = kubeconform(schemas, text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    valid = int(re.search(r"Valid: (\d+)", proc.stdout).group(1))
    checked = [d for d in documents(text) if d["kind"] not in FOREIGN_KINDS]
    assert valid == len(checked), proc.stdout


def test_strict_schemas_catch_mistakes(schemas: Path) -> None:
    """The generated schemas are not permissive: typos and wrong types fail."""
    deployment = next(d for d in documents(render_text()) if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    assert kubeconform(schemas, yaml.safe_dump(deployment)).returncode != 0
    run = yaml.safe_load((HEALTH_SAMPLES / "running.yaml").read_text())
    run["spec"]["parallelism"] = "four"
    assert kubeconform(schemas, yaml.safe_dump(run)).returncode != 0
    run = yaml.safe_load((HEALTH_SAMPLES / "running.yaml").read_text())
    run["spec"]["modle"] = {"name": "x"}
    assert kubeconform(schemas, yaml.safe_dump(run)).returncode != 0


def test_kind_suffix_matches_kubeconform() -> None:
    assert kind_suffix("v1") == "-v1"
    assert kind_suffix("apps/v1") == "-apps-v1"
    assert kind_suffix("rbac.authorization.k8s.io/v1") == "-rbac-v1"
    assert kind_suffix("gdpval.io/v1alpha1") == "-gdpval-v1alpha1"


def test_argocd_application_example_points_at_this_chart() -> None:
    """Argo CD's Application has no schema here; check what can go stale: the path and the values."""
    apps = {d["metadata"]["name"]: d for d in documents((EXAMPLES / "argocd-application.yaml").read_text())}
    operator = apps["gdpval-operator"]["spec"]
    assert (ROOT / operator["source"]["path"]) == CHART
    values = operator["source"]["helm"]["valuesObject"]
    docs = documents(render_text(values))
    assert any(d["kind"] == "Deployment" for d in docs)
    assert "ServerSideApply=true" in operator["syncPolicy"]["syncOptions"]


def test_flux_helmrelease_example_points_at_this_chart_and_waits_on_the_runs(schemas: Path) -> None:
    """Beside kubeconform against Flux's own CRDs (above), what can go stale: the chart path, the values
    and the source names; and a typo in the HelmRelease fails its schema."""
    docs = documents((EXAMPLES / "flux-helmrelease.yaml").read_text())
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    release = by_kind[("HelmRelease", "gdpval")]["spec"]
    chart = release["chart"]["spec"]
    assert (ROOT / chart["chart"]) == CHART and ("GitRepository", chart["sourceRef"]["name"]) in by_kind
    assert any(d["kind"] == "Deployment" for d in documents(render_text(release["values"])))
    runs = by_kind[("Kustomization", "gdpval-runs")]["spec"]
    assert runs["wait"] is True and runs["prune"] is False and ("GitRepository", runs["sourceRef"]["name"]) in by_kind
    broken = copy.deepcopy(by_kind[("HelmRelease", "gdpval")])
    broken["spec"]["chart"]["spec"]["reconcileStrategie"] = "Revision"
    assert kubeconform(schemas, yaml.safe_dump(broken)).returncode != 0
