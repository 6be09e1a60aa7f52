"""Pure builders for every object the operator creates: Jobs, sample Pods, NetworkPolicy, Events.

All pods meet the `restricted` Pod Security Standard and never mount a service-account token.
The sandbox container gets no secret: the model API key reaches only the agent container, and the
S3 credentials only the containers that copy files (stage, agent, Jobs).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gdpval import contract as c
from gdpval.controller import names as n
from gdpval.controller.api import API_VERSION, KIND, GdpvalRunSpec, Resources
from gdpval.settings import RunSettings
from gdpval.storage import layout

PREPARE_BACKOFF_LIMIT = 3
JOB_DEADLINE_SECONDS = 6 * 3600
# Seconds a sample pod gets beyond the agent's own deadline: staging, sandbox start and the upload.
POD_DEADLINE_MARGIN = 600

POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": c.UID,
    "runAsGroup": c.UID,
    "fsGroup": c.UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": c.UID,
    "runAsGroup": c.UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
HEALTH_PROBE = [
    "python3",
    "-c",
    f"import urllib.request; urllib.request.urlopen('{c.SANDBOX_URL}{c.HEALTH_PATH}', timeout=2).read()",
]


@dataclass(frozen=True)
class RunContext:
    """One GdpvalRun as the builders need it: identity, parsed spec, resolved images."""

    name: str
    namespace: str
    uid: str
    spec: GdpvalRunSpec
    agent_image: str
    sandbox_image: str
    legacy_storage: bool = False  # started by an operator that kept a run's files under runs/<name>/

    @property
    def storage_name(self) -> str:
        """The run's folder under runs/ in its output: the `--run-name` of every Job and pod."""
        return self.name if self.legacy_storage else layout.cluster_run(self.namespace, self.name, self.uid)

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def metadata(self, name: str, component: str, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
        labels = {**self.spec.pod.labels, **n.base_labels(self.name, self.uid, component), **(extra_labels or {})}
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": labels,
            "annotations": dict(self.spec.pod.annotations),
            "ownerReferences": [self.owner_reference()],
        }


def pod_deadline(spec: GdpvalRunSpec) -> int | None:
    """activeDeadlineSeconds of a sample pod: the agent's deadline plus time to stage and upload."""
    agent = spec.agent.sample_deadline_seconds
    return agent + POD_DEADLINE_MARGIN if agent else None


def _resources(res: Resources | None) -> dict[str, Any]:
    if res is None:
        return {}
    out = {k: {q: str(v) for q, v in getattr(res, k).items()} for k in ("requests", "limits") if getattr(res, k)}
    return {"resources": out} if out else {}


def s3_env(ctx: RunContext) -> list[dict[str, Any]]:
    out = ctx.spec.output
    env: list[dict[str, Any]] = []
    if out.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": out.endpoint})
    env.append({"name": "AWS_REGION", "value": out.region or "us-east-1"})
    if out.credentials_secret:
        ref = out.credentials_secret
        env += [
            {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.access_key_id_key}}},
            {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.secret_access_key_key}}},
        ]
    return env


def _container(ctx: RunContext, name: str, image: str, command: list[str], res: Resources | None, read_only: bool = True, **extra: Any) -> dict[str, Any]:
    """Our own containers write only to their volumes; the sandbox keeps a writable root for the model's tools."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": ctx.spec.images.pull_policy,
        "command": command,
        "securityContext": {**CONTAINER_SECURITY, "readOnlyRootFilesystem": read_only},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        **_resources(res),
        **extra,
    }


def _pod_spec(ctx: RunContext, containers: list[dict[str, Any]], volumes: list[dict[str, Any]], sample: bool) -> dict[str, Any]:
    pod = ctx.spec.pod
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": dict(POD_SECURITY),
        "containers": containers,
        "volumes": volumes,
    }
    optional = {
        "nodeSelector": pod.node_selector or None,
        "tolerations": pod.tolerations or None,
        "affinity": pod.affinity or None,
        "priorityClassName": pod.priority_class_name,
        "serviceAccountName": pod.service_account_name,
        "runtimeClassName": pod.runtime_class_name if sample else None,
    }
    spec.update({k: v for k, v in optional.items() if v})
    return spec


def _common_args(ctx: RunContext) -> list[str]:
    return ["--run-name", ctx.storage_name, "--output", ctx.spec.output.url]


def settings_json(spec: GdpvalRunSpec) -> str:
    """The run settings inside the spec, as the prepare Job receives them (cluster-only fields dropped)."""
    return json.dumps(RunSettings.of(spec).wire(), sort_keys=True, ensure_ascii=False)


def _job(ctx: RunContext, component: str, args: list[str], backoff_limit: int, env: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    meta = ctx.metadata(n.job_name(ctx.name, component), component)
    env = [*env, *s3_env(ctx), {"name": "HOME", "value": c.SCRATCH}]
    container = _container(
        ctx,
        component,
        ctx.agent_image,
        args,
        ctx.spec.pod.resources.jobs,
        env=env,
        volumeMounts=[{"name": "scratch", "mountPath": c.SCRATCH}],
    )
    template_meta = {"labels": meta["labels"], "annotations": meta["annotations"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": backoff_limit,
            "activeDeadlineSeconds": JOB_DEADLINE_SECONDS,
            **spec,
            "template": {
                "metadata": template_meta,
                "spec": _pod_spec(ctx, [container], [{"name": "scratch", "emptyDir": {}}], sample=False),
            },
        },
    }


def prepare_job(ctx: RunContext) -> dict[str, Any]:
    """`gdpval prepare` with the run settings as JSON in its environment (not as rebuilt flags).

    Its storage holding another run (exit `EXIT_RUN_CONFLICT`) fails the Job at once: retries cannot help.
    """
    owner = f"{ctx.namespace}/{ctx.name}/{ctx.uid}"
    args = ["gdpval", "prepare", "--run-name", ctx.storage_name, "--owner", owner, "--cache-dir", c.CACHE_DIR]
    env = [{"name": c.SETTINGS_ENV, "value": settings_json(ctx.spec)}]
    conflict = {"action": "FailJob", "onExitCodes": {"containerName": n.COMPONENT_PREPARE, "operator": "In", "values": [c.EXIT_RUN_CONFLICT]}}
    return _job(ctx, n.COMPONENT_PREPARE, args, PREPARE_BACKOFF_LIMIT, env, podFailurePolicy={"rules": [conflict]})


def assemble_job(ctx: RunContext) -> dict[str, Any]:
    args = ["gdpval", "submission", "build", *_common_args(ctx)]
    return _job(ctx, n.COMPONENT_ASSEMBLE, args, PREPARE_BACKOFF_LIMIT, [])


def sample_pod(ctx: RunContext, sample_id: str, attempt: int, token: str) -> dict[str, Any]:
    """One attempt: stage (init) -> sandbox (native sidecar) -> agent (main), sharing two emptyDirs."""
    res = ctx.spec.pod.resources
    extra_labels = {
        n.L_SAMPLE: n.label_value(sample_id),
        n.L_ATTEMPT: str(attempt),
        n.L_NETWORK: "true" if ctx.spec.sandbox.network else "false",
    }
    meta = ctx.metadata(n.sample_pod_name(ctx.name, sample_id, attempt), n.COMPONENT_SAMPLE, extra_labels)
    meta["annotations"][n.A_SAMPLE_ID] = sample_id
    refs_ro = {"name": "references", "mountPath": c.REFERENCES, "readOnly": True}
    workspace = {"name": "workspace", "mountPath": c.WORKSPACE}
    scratch = {"name": "scratch", "mountPath": c.SCRATCH}
    home = {"name": "HOME", "value": c.SCRATCH}
    token_env = {"name": c.TOKEN_ENV, "value": token}
    stage = _container(
        ctx,
        "stage",
        ctx.agent_image,
        ["gdpval", "stage", *_common_args(ctx), "--sample", sample_id, "--dest", c.REFERENCES],
        res.stage,
        env=[*s3_env(ctx), home],
        volumeMounts=[{"name": "references", "mountPath": c.REFERENCES}, scratch],
    )
    sandbox = _container(
        ctx,
        "sandbox",
        ctx.sandbox_image,
        ["python3", c.TOOLSERVER, "--listen", f"{c.SANDBOX_HOST}:{c.SANDBOX_PORT}", "--workspace", c.WORKSPACE],
        res.sandbox,
        read_only=False,
        restartPolicy="Always",
        env=[token_env],
        workingDir=c.WORKSPACE,
        volumeMounts=[workspace, refs_ro],
        startupProbe={"exec": {"command": HEALTH_PROBE}, "periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": 180},
    )
    agent_env = [token_env, *s3_env(ctx), home]
    key = ctx.spec.model.api_key_secret_ref
    if key:
        agent_env.insert(0, {"name": c.API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": key.name, "key": key.key}}})
    agent = _container(
        ctx,
        "agent",
        ctx.agent_image,
        ["gdpval", "sample", *_common_args(ctx), "--sample", sample_id, "--attempt", str(attempt), "--sandbox", c.SANDBOX_URL],
        res.agent,
        env=agent_env,
        volumeMounts=[workspace, refs_ro, scratch],
    )
    volumes: list[dict[str, Any]] = [{"name": v, "emptyDir": {}} for v in ("workspace", "references", "scratch")]
    spec = _pod_spec(ctx, [agent], volumes, sample=True)
    spec["initContainers"] = [stage, sandbox]
    deadline = pod_deadline(ctx.spec)
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    spec["terminationGracePeriodSeconds"] = 30
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _endpoint_rule(url: str | None, default_port: int) -> dict[str, Any] | None:
    """Egress to one endpoint: exact IP when the URL names one, else by port (policies cannot match DNS names)."""
    if not url:
        return None
    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme, default_port)
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": port}]}
    try:
        ip = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        return rule
    rule["to"] = [{"ipBlock": {"cidr": f"{ip}/{ip.max_prefixlen}"}}]
    return rule


def network_policy(ctx: RunContext) -> dict[str, Any]:
    """For network-disabled runs: no ingress; egress only to DNS, the model and the S3 endpoint.

    The agent shares the pod's network with the sandbox, so the pod keeps the two endpoints the
    agent needs; everything else (the internet, cluster services) is closed where the CNI enforces
    NetworkPolicy.
    """
    dns = {
        "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    model_url = ctx.spec.model.base_url or "https://api.openai.com/v1"
    s3_url = ctx.spec.output.endpoint or "https://s3.amazonaws.com"
    rules = [r for r in (_endpoint_rule(model_url, 443), _endpoint_rule(s3_url, 443)) if r]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": ctx.metadata(n.network_policy_name(ctx.name), n.COMPONENT_SAMPLE),
        "spec": {
            "podSelector": {"matchLabels": {n.L_RUN_UID: ctx.uid, n.L_COMPONENT: n.COMPONENT_SAMPLE}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [dns, *rules, *ctx.spec.sandbox.allowed_egress],
        },
    }


def ledger_configmap(ctx: RunContext, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": ctx.metadata(n.ledger_name(ctx.name), "ledger"),
        "data": dict(data),
    }


def event(
    run: str,
    namespace: str,
    uid: str,
    kind: str,
    reason: str,
    message: str,
    now_iso: str,
    suffix: str,
    warning: bool = False,
    instance: str = "gdpval-operator",
) -> dict[str, Any]:
    """A core/v1 Event on the GdpvalRun, as `kubectl describe` shows them."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{run[:200]}.{suffix}", "namespace": namespace},
        "involvedObject": {"apiVersion": API_VERSION, "kind": kind, "name": run, "namespace": namespace, "uid": uid},
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "firstTimestamp": now_iso,
        "lastTimestamp": now_iso,
        "count": 1,
        "source": {"component": n.MANAGED_BY},
        "reportingComponent": n.MANAGED_BY,
        "reportingInstance": instance,
    }
