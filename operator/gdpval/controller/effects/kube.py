"""Blocking Kubernetes calls, each idempotent; the async side runs them with `asyncio.to_thread`.

Creates treat 409 AlreadyExists as done and deletes treat 404 as done, which is what makes a
reconcile pass safe to repeat after a crash at any point. Every call has a request timeout: a
connection that hangs fails the pass (retried with backoff) instead of holding a worker slot forever.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gdpval import contract
from gdpval.api import v1alpha1 as api
from gdpval.controller.effects import fanout
from gdpval.controller.pure import queue
from gdpval.controller.pure.policy import REQUEST_TIMEOUT
from gdpval.controller.types import Blocker

# What the API server (or an admission webhook) answers to an object it will not take: returned as its message.
REFUSED = (400, 403, 422)


class SecretForbidden(Exception):
    """RBAC keeps the operator from reading a Secret the run names."""


class NoWorkloadApi(Exception):
    """The cluster serves no Kueue Workloads (Kueue not installed, or another version of its API)."""


class Conflict(Exception):
    """The ledger changed under us (another writer): the pass is abandoned and retried."""


def load_config() -> client.ApiClient:
    """The cluster's client, with a connection for each call a pass issues at once (`fanout.WIDTH`)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = fanout.WIDTH + 4  # and the leader's Lease, status and ledger calls
    return client.ApiClient(configuration)


@dataclass(frozen=True)
class SecretCheck:
    """What the run's Secrets hold; the values never in a repr (nor so in a log line)."""

    blockers: tuple[Blocker, ...]
    s3_credentials: dict[str, str] | None = field(default=None, repr=False)
    model_key: str | None = field(default=None, repr=False)  # for the claim Secret of a pooled pod

    def claim_credentials(self) -> dict[str, str]:
        """The environment a claimed pool pod's agent takes from its claim Secret (contract.CLAIM_DIR)."""
        out = {contract.API_KEY_ENV: self.model_key} if self.model_key is not None else {}
        if self.s3_credentials:
            out |= dict(zip(contract.S3_KEY_ENVS, (self.s3_credentials["access_key_id"], self.s3_credentials["secret_access_key"]), strict=True))
        return out


class Kube:
    def __init__(self, api_client: client.ApiClient, timeout: tuple[float, float] = REQUEST_TIMEOUT):
        self.timeout = timeout
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    # --- reads ---------------------------------------------------------------------------------

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            secret = self.core.read_namespaced_secret(name, namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                raise SecretForbidden(f"the operator may not read Secret {name!r} in {namespace}: grant it `get` on secrets there") from None
            raise
        return dict(secret.data or {}) | {k: "" for k in (secret.string_data or {})}

    def check_secrets(self, namespace: str, spec: api.GdpvalRunSpec) -> SecretCheck:
        """Missing Secrets or keys become blockers with the fix in the message, never exceptions."""
        try:
            return self._check_secrets(namespace, spec)
        except SecretForbidden as exc:
            return SecretCheck((Blocker("SecretForbidden", str(exc)),), None)

    def _check_secrets(self, namespace: str, spec: api.GdpvalRunSpec) -> SecretCheck:
        blockers: list[Blocker] = []
        creds: dict[str, str] | None = None
        key_ref = spec.model.api_key_secret_ref
        model_key = None
        if key_ref:
            key_data = self.secret_data(namespace, key_ref.name)
            missing = _missing(key_data, namespace, key_ref.name, [key_ref.key], "spec.model.apiKeySecretRef")
            blockers += missing
            if key_data is not None and not missing:
                model_key = base64.b64decode(key_data[key_ref.key]).decode()
        judge_ref = spec.judge.api_key_secret_ref if spec.judge else None
        if judge_ref:
            blockers += _missing(self.secret_data(namespace, judge_ref.name), namespace, judge_ref.name, [judge_ref.key], "spec.judge.apiKeySecretRef")
        s3 = spec.output.credentials_secret
        if s3:
            data = self.secret_data(namespace, s3.name)
            wanted = [s3.access_key_id_key, s3.secret_access_key_key]
            problems = _missing(data, namespace, s3.name, wanted, "spec.output.credentialsSecret")
            blockers += problems
            if data is not None and not problems:
                creds = {
                    "access_key_id": base64.b64decode(data[s3.access_key_id_key]).decode(),
                    "secret_access_key": base64.b64decode(data[s3.secret_access_key_key]).decode(),
                }
        return SecretCheck(tuple(blockers), creds, model_key)

    def pod_exists(self, namespace: str, selector: str) -> bool:
        """Whether a pod of these labels exists: a claimed pool pod has a name of its pool, not of its sample."""
        found = self.core.list_namespaced_pod(namespace, label_selector=selector, limit=1, _request_timeout=self.timeout)
        return bool(found.items)

    def read_ledger(self, namespace: str, name: str, uid: str) -> tuple[dict[str, str], str] | None:
        """The ledger's data and resourceVersion, or None when it does not exist.

        A ledger owned by an earlier run of the same name is waited out until the garbage
        collector removes it, so a recreated run never inherits stale state from it.
        """
        try:
            cm = self.core.read_namespaced_config_map(name, namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        owners = {ref.uid for ref in cm.metadata.owner_references or []}
        if uid not in owners:
            raise Conflict(f"ledger {name} belongs to an earlier run of the same name; waiting for its removal")
        return dict(cm.data or {}), cm.metadata.resource_version

    def read_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A queued run's Workload, or None before it is created; NoWorkloadApi when the cluster has no such API."""
        try:
            return self.custom.get_namespaced_custom_object(queue.GROUP, queue.VERSION, namespace, queue.PLURAL, name, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise
            if not _names_object(exc):
                raise NoWorkloadApi(f"{queue.GROUP}/{queue.VERSION} {queue.PLURAL}") from None
            return None

    def workload_priority(self, name: str) -> int | None:
        """A WorkloadPriorityClass's value (Kueue's job integrations copy it into the Workload), None if it does not exist."""
        try:
            found = self.custom.get_cluster_custom_object(queue.GROUP, queue.VERSION, "workloadpriorityclasses", name, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return int(found.get("value", 0))

    # --- writes --------------------------------------------------------------------------------

    def create_ledger(self, manifest: Mapping[str, Any]) -> str:
        try:
            cm = self.core.create_namespaced_config_map(manifest["metadata"]["namespace"], manifest, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict("ledger created concurrently") from None
            raise
        return cm.metadata.resource_version

    def write_ledger(self, namespace: str, name: str, data: Mapping[str, str], resource_version: str, removed: Collection[str] = ()) -> str:
        """Set `data` and drop the `removed` keys, only if nobody changed the ledger since we read it (optimistic concurrency)."""
        body = {"metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version}, "data": {**dict.fromkeys(removed), **data}}
        try:
            cm = self.core.patch_namespaced_config_map(name, namespace, body, _content_type="application/merge-patch+json", _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status in (404, 409):
                raise Conflict(f"ledger {name} changed: {exc.reason}") from None
            raise
        return cm.metadata.resource_version

    def create_pod(self, manifest: Mapping[str, Any]) -> str | None:
        """None when created (or already there); the API's message when it refused the pod."""
        return _create(self.core.create_namespaced_pod, manifest, self.timeout)

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """A merge patch (a pod started ahead gets its go); a pod gone meanwhile is left to the next pass."""
        try:
            _drain(self.core.patch_namespaced_pod(name, namespace, patch, _request_timeout=self.timeout, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete_pod(self, namespace: str, name: str) -> None:
        _delete(self.core.delete_namespaced_pod, namespace, name, self.timeout)

    def create_job(self, manifest: Mapping[str, Any]) -> str | None:
        return _create(self.batch.create_namespaced_job, manifest, self.timeout)

    def delete_job(self, namespace: str, name: str) -> None:
        _delete(self.batch.delete_namespaced_job, namespace, name, self.timeout)

    def suspend_job(self, namespace: str, name: str, suspend: bool) -> None:
        """Set the Job's spec.suspend (the Job controller stops or restarts its pod); a Job gone is fine."""
        try:
            self.batch.patch_namespaced_job(name, namespace, {"spec": {"suspend": suspend}}, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def ensure_network_policy(self, manifest: Mapping[str, Any]) -> None:
        """Create it, or bring an existing one to `manifest` (endpoint addresses resolved again after a restart)."""
        meta = manifest["metadata"]
        try:
            self.net.create_namespaced_network_policy(meta["namespace"], manifest, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.net.patch_namespaced_network_policy(meta["name"], meta["namespace"], manifest, _request_timeout=self.timeout)

    def ensure_secret(self, manifest: Mapping[str, Any]) -> None:
        """Create it once; an existing one is kept (running pods read its value)."""
        try:
            self.core.create_namespaced_secret(manifest["metadata"]["namespace"], manifest, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def post_event(self, manifest: Mapping[str, Any]) -> None:
        try:
            self.core.create_namespaced_event(manifest["metadata"]["namespace"], manifest, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status not in (409, 403):
                raise

    def delete_run(self, namespace: str, name: str) -> None:
        """ttlSecondsAfterFinished: the run goes, its children with it (ownerReferences)."""
        _delete(lambda n, ns, **kw: self.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, ns, api.PLURAL, n, **kw), namespace, name, self.timeout)

    def create_workload(self, manifest: Mapping[str, Any]) -> str | None:
        """None when created (or already there); the API's message when it refused the Workload."""

        def call(namespace: str, body: Mapping[str, Any], **kw: Any) -> Any:
            return self.custom.create_namespaced_custom_object(queue.GROUP, queue.VERSION, namespace, queue.PLURAL, body, **kw)

        return _create(call, manifest, self.timeout)

    def patch_workload(self, namespace: str, name: str, patch: Mapping[str, Any], status: bool = True) -> str | None:
        """A merge patch of its status (or its spec) carrying the resourceVersion it was computed from: a Workload
        Kueue changed meanwhile is a Conflict. A refusal (Kueue's webhook) returns its message."""
        call = self.custom.patch_namespaced_custom_object_status if status else self.custom.patch_namespaced_custom_object
        try:
            call(
                queue.GROUP,
                queue.VERSION,
                namespace,
                queue.PLURAL,
                name,
                dict(patch),
                _content_type="application/merge-patch+json",
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"workload {name} changed: {exc.reason}") from None
            if exc.status in REFUSED:
                return _api_message(exc)
            if exc.status != 404:
                raise
        return None

    def claim_step(self, namespace: str, name: str, patch: list[dict[str, Any]]) -> bool:
        """A step of a pool pod's claim, a JSON patch with its test; False when the pod is gone or its test failed
        (another claim took it first)."""
        try:
            _drain(self.core.patch_namespaced_pod(name, namespace, patch, _request_timeout=self.timeout, _preload_content=False))
            return True
        except ApiException as exc:
            if exc.status in (404, 409, 422):
                return False
            raise

    def create_secret(self, manifest: Mapping[str, Any]) -> str | None:
        """None when created (or there already); the API's message when refused."""
        return _create(self.core.create_namespaced_secret, manifest, self.timeout)

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any], plural: str = api.PLURAL) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                api.GROUP, api.VERSION, namespace, plural, name, {"status": dict(status)}, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status != 404:  # the run was deleted meanwhile
                raise


def _missing(data: Mapping[str, str] | None, namespace: str, name: str, keys: list[str], field: str) -> list[Blocker]:
    if data is None:
        return [Blocker("SecretNotFound", f"{field}: Secret {name!r} not found in namespace {namespace}; create it (kubectl create secret generic {name} ...)")]
    absent = [k for k in keys if k not in data]
    if absent:
        return [Blocker("SecretKeyNotFound", f"{field}: Secret {name!r} has no key {', '.join(map(repr, absent))}; add it or fix the key name")]
    return []


def _names_object(exc: ApiException) -> bool:
    """A 404 about one object (it names it) rather than about a resource type the server does not serve."""
    try:
        return bool((json.loads(exc.body or "{}").get("details") or {}).get("name"))
    except ValueError:
        return False


def _api_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except ValueError:
        return str(exc.reason)


def _create(call: Any, manifest: Mapping[str, Any], timeout: tuple[float, float]) -> str | None:
    """Creates are idempotent (409 means an earlier pass made it); a refusal returns its message."""
    try:
        _drain(call(manifest["metadata"]["namespace"], manifest, _request_timeout=timeout, _preload_content=False))
    except ApiException as exc:
        if exc.status == 409:
            return None
        if exc.status in REFUSED:
            return _api_message(exc)
        raise
    return None


def _delete(call: Any, namespace: str, name: str, timeout: tuple[float, float]) -> None:
    """Deletes are idempotent: a child already gone is what we wanted."""
    try:
        _drain(call(name, namespace, body=client.V1DeleteOptions(propagation_policy="Background"), _request_timeout=timeout, _preload_content=False))
    except ApiException as exc:
        if exc.status != 404:
            raise


def _drain(response: Any) -> None:
    """A create's or delete's reply is not needed: read past it without building the client's models
    (a pod's costs milliseconds of CPU), and give its connection back to the pool."""
    response.read()
    response.release_conn()
