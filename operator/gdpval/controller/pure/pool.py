"""A GdpvalPool's pods: started with nothing of any run, claimed by one run for one sample, the pool kept at its size.

A pooled pod is a sample pod without its run: the sandbox up, the agent imported and waiting ready, no reference file,
no credential, no endpoint. Its shape (images, limits, volumes, scheduling, DNS) is hashed into a label; a run whose own
pod would have the same shape claims a ready one instead of creating a pod. The claim has three steps, each safe to
die after: `lock_patch` takes the pod (a JSON patch moving its ownerReference from the pool to the run, whose test
fails if another claim took it first), `claim_secret` holds the run's credentials (owned by the pod), `claim_patch`
gives it the run's labels, sample and claim (the downward API brings the claim into the agent's folder). The lock
changes nothing the kubelet watches (labels, annotations, spec), so the kubelet syncs the pod once, at the claim: a
second sync within a second of the first waits for its next relist of the containers (up to a second). A pod held
by a run but never given its claim is deleted by the pool (`decide_pool`) `HALF_CLAIM_SECONDS` after the pool first
saw it so, and never returned: each pooled pod serves at most one sample.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gdpval import contract as c
from gdpval.api.v1alpha1 import POOL_KIND, GdpvalPoolSpec, GdpvalPoolStatus, GdpvalRunSpec, ModelSpec, OutputSpec, PodDefaults, SandboxSpec
from gdpval.contract import Claim
from gdpval.controller.pure import manifests as m
from gdpval.controller.pure import names as n
from gdpval.controller.pure import network as net
from gdpval.controller.pure.observe import parse_time, pod_ready

HALF_CLAIM_SECONDS = 30  # a pod held (lock_patch) but not given its claim this long: its claimer died, the pod goes
MAX_POOL_CREATES = 20  # pods a pool pass creates at most; the rest in the next
NO_DNS = {"dnsPolicy": "None", "dnsConfig": {"nameservers": [net.NO_RESOLVER]}}


def pool_context(name: str, namespace: str, uid: str, spec: GdpvalPoolSpec, agent_image: str, sandbox_image: str, defaults: PodDefaults) -> m.RunContext:
    """The pool as the sample-pod builders see it: a run spec of only the pool's shape (no model, no storage)."""
    run_spec = GdpvalRunSpec(
        model=ModelSpec(name="pooled"),
        output=OutputSpec(url="s3://pooled/"),
        images=spec.images,
        sandbox=SandboxSpec(**spec.sandbox.model_dump()),
        pod=spec.pod,
    )
    return m.RunContext(name, namespace, uid, run_spec, agent_image, sandbox_image, pod_defaults=defaults, pool=True)


def _dns(ctx: m.RunContext, resolved: Mapping[str, list[str]] | None) -> str:
    """How the pod resolves names: "none" (a network-off pod with its endpoints pinned; a claimed pod's agent gets the
    addresses in its claim) or "cluster". A run whose network-off pods need DNS matches no pool."""
    if ctx.pool:
        return "cluster" if ctx.spec.sandbox.network else "none"
    return "none" if net.pod_dns(ctx.spec, resolved) else "cluster"


def shape(ctx: m.RunContext, resolved: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """What makes two sample pods interchangeable before their run is known."""
    pod = ctx.spec.pod
    sandbox = ctx.spec.sandbox
    return {
        "images": [ctx.agent_image, ctx.sandbox_image, ctx.spec.images.pull_policy],
        "sandbox": [sandbox.memory_mib, sandbox.disk_mib, sandbox.cpus, sandbox.network],
        "resources": {k: v.model_dump(mode="json") for k, v in m.container_resources(ctx).items()},
        "volumes": m.volume_sizes(ctx),
        "scheduling": [
            pod.node_selector,
            pod.tolerations,
            pod.affinity,
            pod.priority_class_name,
            pod.runtime_class_name or ctx.pod_defaults.runtime_class_name,
            pod.service_account_name,
        ],
        "dns": _dns(ctx, resolved),
    }


def shape_hash(ctx: m.RunContext, resolved: Mapping[str, list[str]] | None = None) -> str:
    text = json.dumps(shape(ctx, resolved), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pooled_pod(ctx: m.RunContext, shape_id: str, suffix: str) -> dict[str, Any]:
    """A pod of the pool: its sandbox (native sidecar) and an agent that waits for a claim; its references, scratch and
    workspace empty, the pool's tool-server token its only secret. No deadline until its claim. Named here, not by
    generateName: its claim volume names the claim's Secret, which is named after the pod."""
    res = m.container_resources(ctx)
    labels = {
        **ctx.spec.pod.labels,
        n.L_NAME: "gdpval",
        n.L_MANAGED_BY: n.MANAGED_BY,
        n.L_COMPONENT: n.COMPONENT_POOLED,
        n.L_POOL: n.label_value(ctx.name),
        n.L_SHAPE: shape_id,
        n.L_CLAIMED: "",
    }
    annotations = {**ctx.spec.pod.annotations, n.A_CLAIM: "", n.A_GO: ""}
    name = n.pool_pod_prefix(ctx.name) + suffix
    meta = {"name": name, "namespace": ctx.namespace, "labels": labels, "annotations": annotations, "ownerReferences": [ctx.owner_reference()]}
    spec = m.pod_spec(ctx, [_agent(ctx, res["agent"])], [*m.sample_volumes(ctx), _claim_volume(name)], sample=True)
    spec["initContainers"] = [m.sandbox_container(ctx, res["sandbox"])]
    spec["terminationGracePeriodSeconds"] = 30
    if _dns(ctx, None) == "none":
        spec |= NO_DNS
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _claim_volume(pod: str) -> dict[str, Any]:
    """The claim and the go from annotations, the claim's Secret (optional: absent until the claim) beside them."""
    items = [
        {"path": c.CLAIM_FILE.rsplit("/", 1)[1], "fieldRef": {"fieldPath": f"metadata.annotations['{n.A_CLAIM}']"}},
        {"path": c.CLAIM_GO_FILE.rsplit("/", 1)[1], "fieldRef": {"fieldPath": f"metadata.annotations['{n.A_GO}']"}},
    ]
    return {
        "name": "claim",
        "projected": {
            "defaultMode": 0o440,
            "sources": [{"downwardAPI": {"items": items}}, {"secret": {"name": n.claim_secret_name(pod), "optional": True}}],
        },
    }


def _agent(ctx: m.RunContext, res: m.Resources) -> dict[str, Any]:
    """The waiting agent: the pool's token, the claim folder (references writable: it stages them itself)."""
    token_env = {"name": c.TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": ctx.token_secret, "key": c.TOKEN_KEY}}}
    mounts = [{**m.WORKSPACE}, {"name": "references", "mountPath": c.REFERENCES}, {**m.SCRATCH}, {"name": "claim", "mountPath": c.CLAIM_DIR, "readOnly": True}]
    command = ["gdpval", "pool-sample", "--claim-dir", c.CLAIM_DIR, "--sandbox", c.SANDBOX_URL]
    agent = m.build_container(ctx, "agent", ctx.agent_image, command, res, env=[token_env, {**m.HOME}], volumeMounts=mounts)
    agent["startupProbe"] = m.ready_probe(ctx.spec)
    return agent


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def lock_patch(pod: PooledView, run_owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The claim's first step, atomic: the pod's owner becomes the run, unless another claim moved it first (422)."""
    return [
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": pod.owner},
        {"op": "replace", "path": "/metadata/ownerReferences", "value": [dict(run_owner)]},
    ]


def claim_secret(ctx: m.RunContext, pod: PooledView, claim_id: str, credentials: Mapping[str, str]) -> dict[str, Any]:
    """The run's credentials for one claimed pod, owned by it (gone with it), read only by its agent."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}
    labels = {n.L_MANAGED_BY: n.MANAGED_BY, n.L_POOL: pod.pool, n.L_RUN_UID: ctx.uid}
    meta = {"name": n.claim_secret_name(pod.name), "namespace": ctx.namespace, "labels": labels, "ownerReferences": [owner]}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": {**credentials, c.CLAIM_ID_KEY: claim_id}}


def claim_of(ctx: m.RunContext, claim_id: str, sample: str, attempt: int, ahead: bool, resolved: Mapping[str, list[str]] | None) -> Claim:
    out = ctx.spec.output
    return Claim(
        id=claim_id,
        run=ctx.storage_name,
        output=out.url,
        sample=sample,
        attempt=attempt,
        ahead=ahead,
        endpoint=out.endpoint or "",
        region=out.region or "us-east-1",
        outage_hold=ctx.spec.samples.outage_hold_seconds,
        hosts=net.pinned_hosts(ctx.spec, resolved) or {},
    )


def claim_patch(ctx: m.RunContext, claim: Claim, age: float) -> list[dict[str, Any]]:
    """The claim's last step, the one the kubelet sees: the pod becomes the run's sample pod, as sample_pod would
    have made it, only while this run holds it and nothing claimed it. Kueue's labels stay the pool's (the pod was
    admitted under them); a claim made ahead of its turn waits for its go."""
    labels = {k: v for k, v in ctx.spec.pod.labels.items() if not k.startswith("kueue.x-k8s.io/")}
    labels |= n.base_labels(ctx.name, ctx.uid, n.COMPONENT_SAMPLE)
    labels |= {n.L_SAMPLE: n.label_value(claim.sample), n.L_ATTEMPT: str(claim.attempt), n.L_NETWORK: "true" if ctx.spec.sandbox.network else "false"}
    labels[n.L_CLAIMED] = ctx.uid
    annotations = {**ctx.spec.pod.annotations, n.A_SAMPLE_ID: claim.sample, n.A_CLAIM: claim.wire(), n.A_GO: "" if claim.ahead else c.GO_VALUE}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": ctx.uid},
        {"op": "test", "path": f"/metadata/labels/{_escape(n.L_CLAIMED)}", "value": ""},
    ]
    ops += [{"op": "add", "path": f"/metadata/labels/{_escape(k)}", "value": v} for k, v in labels.items()]
    ops += [{"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v} for k, v in annotations.items()]
    deadline = m.pod_deadline(ctx.spec)
    if deadline and not claim.ahead:
        ops.append({"op": "add", "path": "/spec/activeDeadlineSeconds", "value": int(age) + 1 + deadline})
    return ops


@dataclass(frozen=True)
class PooledView:
    """A pod of a pool, claimed or not, as the pool and the runs that claim from it see it."""

    name: str
    uid: str
    pool: str
    shape: str
    claimed: str  # "" until the claim's last step, then the claiming run's uid
    owner: str  # the uid of its controller: its pool's until a run's claim holds it
    held: bool  # a run holds it (lock_patch) and has not claimed it yet
    phase: str
    ready: bool
    deleting: bool
    created: float

    @property
    def live(self) -> bool:
        return not (self.deleting or self.phase in ("Succeeded", "Failed"))

    @property
    def free(self) -> bool:
        """Claimable: in the pool, live and its agent waiting ready."""
        return not (self.claimed or self.held) and self.live and self.ready


def parse_pooled(body: Mapping[str, Any]) -> PooledView:
    meta = body.get("metadata", {}) or {}
    labels = meta.get("labels", {}) or {}
    owner = next(iter(meta.get("ownerReferences") or []), None) or {}
    status = body.get("status", {}) or {}
    claimed = labels.get(n.L_CLAIMED, "")
    return PooledView(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        pool=labels.get(n.L_POOL, ""),
        shape=labels.get(n.L_SHAPE, ""),
        claimed=claimed,
        owner=owner.get("uid", ""),
        held=not claimed and owner.get("kind") != POOL_KIND,
        phase=status.get("phase", "Pending"),
        ready=pod_ready(status),
        deleting=bool(meta.get("deletionTimestamp")),
        created=parse_time(meta.get("creationTimestamp")),
    )


def candidates(pods: Sequence[PooledView], shape_id: str, taken: set[str]) -> list[PooledView]:
    """Free pods of `shape_id`, oldest first (the longest ready), without those this process is claiming."""
    return sorted((p for p in pods if p.free and p.shape == shape_id and p.name not in taken), key=lambda p: (p.created, p.name))


@dataclass
class PoolPlan:
    create: int = 0
    delete: list[str] = field(default_factory=list)
    status: GdpvalPoolStatus = field(default_factory=GdpvalPoolStatus)
    wake_at: list[float] = field(default_factory=list)
    held_since: dict[str, float] = field(default_factory=dict)  # held pods, when the pool first saw each held


def decide_pool(
    spec: GdpvalPoolSpec, generation: int, shape_id: str, pods: Sequence[PooledView], creating: int, now: float, held_since: Mapping[str, float]
) -> PoolPlan:
    """Keep `spec.size` unclaimed live pods of the current shape: replace ended ones, drop those of an old shape and
    the extras (not-ready first), delete half-made claims; `creating` pods were asked for and not seen yet. A held pod
    is timed from when a pass first saw it held (`held_since`, this process's memory): a restart only waits longer."""
    plan = PoolPlan()
    unclaimed = [p for p in pods if not (p.claimed or p.held) and p.live]
    current = sorted((p for p in unclaimed if p.shape == shape_id), key=lambda p: (p.ready, p.created))
    plan.delete += [p.name for p in pods if not p.claimed and not p.live and not p.deleting]
    plan.delete += [p.name for p in unclaimed if p.shape != shape_id]
    extra = len(current) + creating - spec.size
    plan.delete += [p.name for p in current[: max(extra, 0)]]
    for p in pods:
        if p.held and p.live:
            since = plan.held_since[p.name] = held_since.get(p.name, now)
            if now - since >= HALF_CLAIM_SECONDS:
                plan.delete.append(p.name)
            else:
                plan.wake_at.append(since + HALF_CLAIM_SECONDS)
    kept = current[max(extra, 0) :]
    ready = sum(p.ready for p in kept)
    starting = len(kept) - ready
    wanted = _paced(spec, spec.size - len(kept) - creating, starting + creating)
    plan.create = min(wanted, MAX_POOL_CREATES)
    claimed = sum(1 for p in pods if p.claimed and p.live)
    plan.status = GdpvalPoolStatus(observed_generation=generation, shape=shape_id, size=spec.size, ready=ready, starting=starting, claimed=claimed)
    if plan.create < wanted:
        plan.wake_at.append(now)  # the rest in the next pass; a pod's readiness wakes the pool for a paced one
    return plan


def _paced(spec: GdpvalPoolSpec, missing: int, starting: int) -> int:
    """Pods to create for `missing` ones while `starting` are not ready yet, within spec.maxStarting (0: no bound)."""
    if spec.max_starting:
        missing = min(missing, spec.max_starting - starting)
    return max(missing, 0)
