"""Pure builders for every object the operator creates: Jobs, sample Pods, NetworkPolicy, Secret, Events
(what the sample pods may reach is decided in `network`).

All pods meet the `restricted` Pod Security Standard and never mount a service-account token.
The sandbox container gets no credential: the model API key reaches only the agent container, the
S3 credentials only the containers that copy files (stage, agent, Jobs), and the sandbox only its
own tool-server token, as a file from the run's token Secret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from gdpval import contract as c
from gdpval.api.v1alpha1 import API_VERSION, KIND, POOL_KIND, GdpvalRunSpec, PodDefaults, Quantity, Resources, VolumeSizes
from gdpval.controller.pure import names as n
from gdpval.controller.pure import network as net
from gdpval.render.limits import RenderLimits
from gdpval.settings import RunSettings, SandboxSettings, tmpfs_sizes
from gdpval.storage import layout

PREPARE_BACKOFF_LIMIT = 3
JOB_DEADLINE_SECONDS = 6 * 3600
# Seconds between two looks of the kubelet for the ready file of an agent started ahead (its startup probe).
READY_PROBE_PERIOD = 1
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
MIB = 1024 * 1024

# Built-in sizes, below the chart's podDefaults and a run's spec.pod. Requests stay small so a
# window of `parallelism` pods schedules on a modest node; limits are what holds a hostile sample.
DEFAULT_VOLUMES = VolumeSizes(references="4Gi", scratch="1Gi")
DEFAULT_REQUESTS = {"cpu": "50m", "memory": "256Mi", "ephemeral-storage": "64Mi"}
DEFAULT_LIMITS = {"stage": {"memory": "512Mi"}, "agent": {"memory": "1Gi"}, "sandbox": {}}
SAMPLE_CONTAINERS = ("stage", "sandbox", "agent")
# The prepare, assemble and judge Jobs' own, below the chart's podDefaults.resources.jobs and spec.pod.resources.jobs: a CPU
# request, or they are BestEffort (cgroup v1 cpu.shares 2: a prepare Job once ran 10 minutes on 1 s of CPU beside
# other pods), and a memory limit well above what they hold (the tasks' parquet, then one file at a time).
DEFAULT_JOB_RESOURCES = Resources(requests={"cpu": "200m", "memory": "256Mi"}, limits={"memory": "2Gi"})


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
    pod_defaults: PodDefaults = field(default_factory=PodDefaults)  # the chart's podDefaults
    pool: bool = False  # a GdpvalPool's pods as the builders see them (controller.pure.pool): its name, its own token

    @property
    def token_secret(self) -> str:
        """The tool-server token's Secret: the run's, or the pool's (shared by its pods until each is claimed)."""
        return n.pool_token_secret_name(self.name) if self.pool else n.token_secret_name(self.name)

    @property
    def storage_name(self) -> str:
        """The run's folder under runs/ in its output: the `--run-name` of every Job and pod."""
        return self.name if self.legacy_storage else layout.cluster_run(self.namespace, self.name, self.uid)

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": POOL_KIND if self.pool else KIND,
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


def _bytes(quantity: Quantity) -> Decimal:
    return Decimal(parse_quantity(quantity))


def volume_sizes(ctx: RunContext) -> dict[str, str]:
    """sizeLimit of each emptyDir of a sample pod: the run's spec, else the chart's, else ours; the
    workspace is the sandbox's disk; its /tmp and /dev/shm are tmpfs counted in its memory, so sized
    below it as locally (settings.tmpfs_sizes): filled, they leave the tool server room."""
    sizes = {
        name: str(getattr(ctx.spec.pod.volumes, name) or getattr(ctx.pod_defaults.volumes, name) or getattr(DEFAULT_VOLUMES, name))
        for name in ("references", "scratch")
    }
    sandbox = ctx.spec.sandbox
    tmp, shm = tmpfs_sizes(sandbox.memory_mib)
    return {**sizes, "workspace": f"{sandbox.disk_mib}Mi", "sandbox-tmp": f"{tmp}Mi", "sandbox-shm": f"{shm}Mi"}


def sandbox_limits(sandbox: SandboxSettings) -> dict[str, str]:
    """The sandbox settings that mean the same thing in a pod: memory (its /tmp included), CPU quota, disk."""
    limits = {"memory": f"{sandbox.memory_mib}Mi", "ephemeral-storage": f"{sandbox.disk_mib}Mi"}
    if sandbox.cpus:
        limits["cpu"] = f"{round(sandbox.cpus * 1000)}m"
    return limits


def _merge(*layers: Resources | None) -> Resources:
    """Later layers win key by key; a request above its limit is lowered to the limit (the API refuses it)."""
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    for layer in layers:
        if layer is not None:
            requests |= layer.requests
            limits |= layer.limits
    for name, limit in limits.items():
        if name in requests and _bytes(requests[name]) > _bytes(limit):
            requests[name] = limit
    return Resources(requests=requests, limits=limits)


def container_resources(ctx: RunContext) -> dict[str, Resources]:
    """Requests and limits of stage, sandbox and agent: ours < the chart's podDefaults < spec.sandbox < spec.pod.resources.

    Ephemeral storage: the kubelet evicts a pod whose volumes, writable layers and logs together pass
    the sum of its containers' limits, so the sandbox's (its disk) and the agent's (references and
    scratch) add up to the pod's volumes; the stage's covers what it writes before the others start.
    """
    sizes = volume_sizes(ctx)
    copies = f"{int(_bytes(sizes['references']) + _bytes(sizes['scratch']))}"
    ours = {name: Resources(requests=DEFAULT_REQUESTS, limits=DEFAULT_LIMITS[name]) for name in SAMPLE_CONTAINERS}
    for name in ("stage", "agent"):
        ours[name].limits["ephemeral-storage"] = copies
    derived = {"sandbox": Resources(limits=sandbox_limits(ctx.spec.sandbox))}
    chart, spec = ctx.pod_defaults.resources, ctx.spec.pod.resources
    return {name: _merge(ours[name], getattr(chart, name), derived.get(name), getattr(spec, name)) for name in SAMPLE_CONTAINERS}


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


def build_container(ctx: RunContext, name: str, image: str, command: list[str], res: Resources | None, read_only: bool = True, **extra: Any) -> dict[str, Any]:
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


def pod_spec(ctx: RunContext, containers: list[dict[str, Any]], volumes: list[dict[str, Any]], sample: bool) -> dict[str, Any]:
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
        "runtimeClassName": (pod.runtime_class_name or ctx.pod_defaults.runtime_class_name) if sample else None,
    }
    spec.update({k: v for k, v in optional.items() if v})
    return spec


def _common_args(ctx: RunContext) -> list[str]:
    return ["--run-name", ctx.storage_name, "--output", ctx.spec.output.url]


def settings_json(spec: GdpvalRunSpec) -> str:
    """The run settings inside the spec, as the prepare Job receives them (cluster-only fields dropped)."""
    return json.dumps(RunSettings.of(spec).wire(), sort_keys=True, ensure_ascii=False)


def _job(
    ctx: RunContext, component: str, args: list[str], backoff_limit: int, env: list[dict[str, Any]], ours: Resources | None = None, **spec: Any
) -> dict[str, Any]:
    """A Job of one container of the agent image; its resources are `ours` < the chart's podDefaults < spec.pod.resources.jobs."""
    meta = ctx.metadata(n.job_name(ctx.name, component), component)
    env = [*env, *s3_env(ctx), {"name": "HOME", "value": c.SCRATCH}]
    container = build_container(
        ctx,
        component,
        ctx.agent_image,
        args,
        _merge(ours, ctx.pod_defaults.resources.jobs, ctx.spec.pod.resources.jobs),
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
                "spec": pod_spec(ctx, [container], [{"name": "scratch", "emptyDir": {}}], sample=False),
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
    return _job(ctx, n.COMPONENT_PREPARE, args, PREPARE_BACKOFF_LIMIT, env, DEFAULT_JOB_RESOURCES, podFailurePolicy={"rules": [conflict]})


def assemble_job(ctx: RunContext) -> dict[str, Any]:
    """`gdpval submission build`, whose readiness check opens each deliverable in a render sidecar, as the judge does."""
    args = ["gdpval", "submission", "build", *_common_args(ctx)]
    return with_render_sidecar(ctx, _job(ctx, n.COMPONENT_ASSEMBLE, args, PREPARE_BACKOFF_LIMIT, [], DEFAULT_JOB_RESOURCES))


def judge_job(ctx: RunContext) -> dict[str, Any]:
    """`gdpval judge` over the run's output, the key (if any) from its Secret as OPENAI_API_KEY; files rendered in a
    sidecar of the run's sandbox image (with_render_sidecar)."""
    judge = ctx.spec.judge
    assert judge is not None, "a judge Job is only planned for a spec with a judge section"
    args = ["gdpval", "judge", *_common_args(ctx), "--judge-model", judge.model, "--judge-base-url", judge.base_url]
    args += ["--concurrency", str(judge.concurrency), "--tries", str(judge.tries), "--method", judge.method]
    args += ["--max-inconsistency", str(judge.max_inconsistency)]
    ref = judge.api_key_secret_ref
    env = [{"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}] if ref else []
    return with_render_sidecar(ctx, _job(ctx, n.COMPONENT_JUDGE, args, PREPARE_BACKOFF_LIMIT, env, DEFAULT_JOB_RESOURCES))


def with_render_sidecar(ctx: RunContext, job: dict[str, Any]) -> dict[str, Any]:
    """`job` (the judge's or the assemble Job) rendering files in a sidecar of the run's sandbox image (render_sidecar):
    its container told where the sidecar listens and which image it runs, sharing the render folder and the token."""
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["env"] = [{"name": c.RENDER_URL_ENV, "value": c.SANDBOX_URL}, {"name": c.RENDER_IMAGE_ENV, "value": ctx.sandbox_image}, *container["env"]]
    render = {"name": "render", "mountPath": c.RENDER_DIR}
    token_ro = {"name": "render-token", "mountPath": c.RENDER_TOKEN_DIR, "readOnly": True}
    container["volumeMounts"] += [render, token_ro]
    pod["initContainers"] = render_sidecar(ctx)
    pod["volumes"] += render_volumes()
    return job


RENDER_LIMITS = RenderLimits()
RENDER_TMP = "256Mi"  # the sidecar's /tmp (memory-backed, inside its memory limit): LibreOffice keeps its profile in the shared folder
RENDER_TOKEN_SIZE = "1Mi"
TOKEN_MAKER = {"cpu": "100m", "memory": "64Mi"}  # the init container that writes the token: one python -c
MAKE_TOKEN = f"import secrets; open({c.RENDER_TOKEN_FILE!r}, 'w').write(secrets.token_urlsafe(32))"


def render_volumes() -> list[dict[str, Any]]:
    """The folder the judge and its sidecar share (files in, views out), the sidecar's /tmp, the pod-made token."""
    return [
        {"name": "render", "emptyDir": {"sizeLimit": f"{RENDER_LIMITS.disk_bytes // MIB}Mi"}},
        {"name": "render-tmp", "emptyDir": {"medium": "Memory", "sizeLimit": RENDER_TMP}},
        {"name": "render-token", "emptyDir": {"medium": "Memory", "sizeLimit": RENDER_TOKEN_SIZE}},
    ]


def render_sidecar(ctx: RunContext) -> list[dict[str, Any]]:
    """The init containers of a pod that renders (judge, assemble): one writes a fresh tool-server token (no Secret, nothing in the spec), then the
    run's sandbox image serves its tool server to that pod's main container alone (native sidecar, loopback), with a read-only root,
    the render limits as its container's, no credential and no storage access: it sees only the shared folder."""
    token = build_container(
        ctx, "render-token", ctx.agent_image, ["python3", "-I", "-c", MAKE_TOKEN], Resources(requests=TOKEN_MAKER, limits=TOKEN_MAKER),
        volumeMounts=[{"name": "render-token", "mountPath": c.RENDER_TOKEN_DIR}],
    )  # fmt: skip
    listen = f"{c.SANDBOX_HOST}:{c.SANDBOX_PORT}"
    limits = {"memory": f"{RENDER_LIMITS.memory_bytes // MIB}Mi", "ephemeral-storage": f"{RENDER_LIMITS.disk_bytes // MIB}Mi"}
    server = ["python3", c.TOOLSERVER, "--listen", listen, "--workspace", c.RENDER_DIR, "--token-file", c.RENDER_TOKEN_FILE]
    sidecar = build_container(
        ctx,
        "render",
        ctx.sandbox_image,
        [*server, "--max-file-bytes", str(RENDER_LIMITS.disk_bytes)],
        Resources(requests=DEFAULT_REQUESTS, limits=limits),
        restartPolicy="Always",
        workingDir=c.RENDER_DIR,
        env=[{"name": "HOME", "value": c.SCRATCH}],
        volumeMounts=[
            {"name": "render", "mountPath": c.RENDER_DIR},
            {"name": "render-tmp", "mountPath": c.SCRATCH},
            {"name": "render-token", "mountPath": c.RENDER_TOKEN_DIR, "readOnly": True},
        ],
    )
    return [token, sidecar]


def token_secret(ctx: RunContext, token: str) -> dict[str, Any]:
    """The run's tool-server token, shared by its sample pods (each tool server listens on its own pod's loopback)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": ctx.metadata(ctx.token_secret, n.COMPONENT_SAMPLE),
        "type": "Opaque",
        "stringData": {c.TOKEN_KEY: token},
    }


def sample_volumes(ctx: RunContext) -> list[dict[str, Any]]:
    sizes = volume_sizes(ctx)
    dirs = [{"name": v, "emptyDir": {"sizeLimit": sizes[v]}} for v in ("workspace", "references", "scratch")]
    tmp = [{"name": v, "emptyDir": {"medium": "Memory", "sizeLimit": sizes[v]}} for v in ("sandbox-tmp", "sandbox-shm")]
    items = [{"key": c.TOKEN_KEY, "path": c.TOKEN_KEY}]
    token = {"name": "token", "secret": {"secretName": ctx.token_secret, "defaultMode": 0o440, "items": items}}
    return [*dirs, *tmp, token]


def sample_pod(ctx: RunContext, sample_id: str, attempt: int, resolved: Mapping[str, list[str]] | None = None, ahead: bool = False) -> dict[str, Any]:
    """One attempt: sandbox (native sidecar) beside stage (init) -> agent (main), sharing emptyDirs of bounded size.
    `resolved` is what the run's NetworkPolicy was built from: with the network off it may pin the endpoints (see pinned_hosts).
    A pod started `ahead` of its turn (spec.samples.startAhead) does all but its first model request, then waits for its go
    (`go_patch`), read through the downward API: no API access in the pod. Its deadline starts at the go."""
    res = container_resources(ctx)
    extra_labels = {
        n.L_SAMPLE: n.label_value(sample_id),
        n.L_ATTEMPT: str(attempt),
        n.L_NETWORK: "true" if ctx.spec.sandbox.network else "false",
    }
    meta = ctx.metadata(n.sample_pod_name(ctx.name, sample_id, attempt), n.COMPONENT_SAMPLE, extra_labels)
    meta["annotations"][n.A_SAMPLE_ID] = sample_id
    agent = _agent(ctx, res["agent"], sample_id, attempt, ahead)
    volumes = sample_volumes(ctx)
    if ahead:
        meta["annotations"][n.A_GO] = ""
        item = {"path": c.GO_FILE.rsplit("/", 1)[1], "fieldRef": {"fieldPath": f"metadata.annotations['{n.A_GO}']"}}
        volumes.append({"name": "go", "downwardAPI": {"items": [item]}})
    spec = pod_spec(ctx, [agent], volumes, sample=True)
    # The sandbox first and without a startup probe, so the tool server boots while `stage` copies the
    # references; the agent waits for its health itself (bounded, naming the sandbox when it never answers).
    spec["initContainers"] = [sandbox_container(ctx, res["sandbox"]), _stage(ctx, res["stage"], sample_id)]
    deadline = pod_deadline(ctx.spec)
    if deadline and not ahead:
        spec["activeDeadlineSeconds"] = deadline
    spec["terminationGracePeriodSeconds"] = 30
    spec |= net.pod_dns(ctx.spec, resolved)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# Mounts and variables several containers share; each container gets copies (`{**X}`), never the object.
REFERENCES_RO = {"name": "references", "mountPath": c.REFERENCES, "readOnly": True}
WORKSPACE = {"name": "workspace", "mountPath": c.WORKSPACE}
SCRATCH = {"name": "scratch", "mountPath": c.SCRATCH}
HOME = {"name": "HOME", "value": c.SCRATCH}


def _stage(ctx: RunContext, res: Resources, sample_id: str) -> dict[str, Any]:
    """The init container that copies the sample's reference files from S3."""
    command = ["gdpval", "stage", *_common_args(ctx), "--sample", sample_id, "--dest", c.REFERENCES]
    mounts = [{"name": "references", "mountPath": c.REFERENCES}, {**SCRATCH}]
    return build_container(ctx, "stage", ctx.agent_image, command, res, env=[*s3_env(ctx), {**HOME}], volumeMounts=mounts)


def sandbox_container(ctx: RunContext, res: Resources) -> dict[str, Any]:
    """The tool server, a native sidecar: no credential, only its own token as a file."""
    listen = f"{c.SANDBOX_HOST}:{c.SANDBOX_PORT}"
    mounts = [
        {**WORKSPACE},
        {**REFERENCES_RO},
        {"name": "sandbox-tmp", "mountPath": c.SCRATCH},
        {"name": "sandbox-shm", "mountPath": "/dev/shm"},
        {"name": "token", "mountPath": c.TOKEN_DIR, "readOnly": True},
    ]
    command = ["python3", c.TOOLSERVER, "--listen", listen, "--workspace", c.WORKSPACE, "--token-file", c.TOKEN_FILE]
    extra = {"restartPolicy": "Always", "workingDir": c.WORKSPACE, "volumeMounts": mounts}
    return build_container(ctx, "sandbox", ctx.sandbox_image, command, res, read_only=False, **extra)


def _agent(ctx: RunContext, res: Resources, sample_id: str, attempt: int, ahead: bool) -> dict[str, Any]:
    """The agent: the model's key, S3's credentials and the sandbox's token; started ahead, it waits for its go file."""
    token_env = {"name": c.TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": ctx.token_secret, "key": c.TOKEN_KEY}}}
    hold = {"name": c.OUTAGE_HOLD_ENV, "value": str(ctx.spec.samples.outage_hold_seconds)}
    env = [token_env, *s3_env(ctx), {**HOME}, hold]
    key = ctx.spec.model.api_key_secret_ref
    if key:
        env.insert(0, {"name": c.API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": key.name, "key": key.key}}})
    go = ["--go", c.GO_FILE] if ahead else []
    go_mount = [{"name": "go", "mountPath": c.GO_DIR, "readOnly": True}] if ahead else []
    command = ["gdpval", "sample", *_common_args(ctx), "--sample", sample_id, "--attempt", str(attempt), "--sandbox", c.SANDBOX_URL, *go]
    agent = build_container(ctx, "agent", ctx.agent_image, command, res, env=env, volumeMounts=[{**WORKSPACE}, {**REFERENCES_RO}, {**SCRATCH}, *go_mount])
    if ahead:
        agent["startupProbe"] = ready_probe(ctx.spec)
    return agent


def ready_probe(spec: GdpvalRunSpec) -> dict[str, Any]:
    """The startup probe of the agent of a pod started ahead: it passes once the agent waits ready for its go
    (contract.READY_FILE), which turns the pod Ready. An exec of `test`, not an HTTP check: the agent opens no
    port, which the sandbox (same network) could reach; and a startup probe stops once it passes, so it costs
    nothing while the sample runs. An agent not ready within spec.samples.pendingTimeoutSeconds is stuck, as a
    pod that long Pending is: the kubelet ends it and the attempt counts as failed."""
    return {
        "exec": {"command": ["test", "-e", c.READY_FILE]},
        "periodSeconds": READY_PROBE_PERIOD,
        "failureThreshold": max(spec.samples.pending_timeout_seconds // READY_PROBE_PERIOD, 1),
    }


def go_patch(spec: GdpvalRunSpec, age: float) -> dict[str, Any]:
    """The merge patch that lets a pod started ahead run its sample: the go its agent waits for, and the
    deadline it was created without, counted from now (a deadline may be set on a running pod, not raised)."""
    patch: dict[str, Any] = {"metadata": {"annotations": {n.A_GO: c.GO_VALUE}}}
    deadline = pod_deadline(spec)
    if deadline:
        patch["spec"] = {"activeDeadlineSeconds": int(age) + 1 + deadline}
    return patch


def network_policy(ctx: RunContext, resolved: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """The egress of a run's sample pods (see network.egress); no ingress. `resolved` maps endpoint host names
    to their addresses. It holds where the CNI enforces NetworkPolicy."""
    network = ctx.spec.sandbox.network
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": ctx.metadata(n.network_policy_name(ctx.name, network), n.COMPONENT_SAMPLE),
        "spec": {
            "podSelector": {"matchLabels": {n.L_RUN_UID: ctx.uid, n.L_COMPONENT: n.COMPONENT_SAMPLE}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": net.egress(ctx.spec, resolved),
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
