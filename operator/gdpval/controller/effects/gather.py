"""What a pass reads beyond the kopf indexes: Secrets, the ledger, the manifest, S3 probes, the submission.

Blocking calls run in threads. Problems a user can fix (a missing Secret, unreachable storage)
come back as blockers, never as exceptions, so the run's status can say what to do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from gdpval.api.v1alpha1 import GdpvalRunSpec, OutputSpec
from gdpval.controller.effects import s3 as s3io
from gdpval.controller.effects.fanout import fan_out
from gdpval.controller.effects.kube import Kube, NoWorkloadApi, SecretCheck
from gdpval.controller.effects.memory import RunMemory
from gdpval.controller.pure import manifests, queue, workload
from gdpval.controller.pure import names as n
from gdpval.controller.pure.decide import needed_probes
from gdpval.controller.pure.ledger import Ledger, decode, encode_cluster, merge, segments_of, split
from gdpval.controller.pure.manifests import RunContext
from gdpval.controller.pure.policy import job_error_current, secrets_due
from gdpval.controller.types import Blocker, Observed, Probe
from gdpval.records import is_prepared
from gdpval.settings import DEFAULT_JUDGE_METHOD
from gdpval.storage import NotFound, Storage, StorageError, layout

log = logging.getLogger("gdpval.operator")
OpenStorage = Callable[[OutputSpec, Mapping[str, str] | None], Storage]


def indexed(index: Mapping[str, Any], uid: str) -> tuple:
    """The run's entries of a kopf index (empty before the index has any)."""
    store = index.get(uid) if index else None
    return tuple(store) if store else ()


class Gatherer:
    def __init__(self, kube: Kube, open_storage: OpenStorage):
        self.kube = kube
        self.open_storage = open_storage

    async def gather(self, memory: RunMemory, ctx: RunContext, obs: Observed) -> tuple[Observed, str | None]:
        """`obs` completed, with the ledger's resourceVersion; None instead when a blocker stops the pass."""
        obs = await self.workload(ctx, obs)
        blockers = [*obs.blockers, *static_blockers(memory, ctx, obs.now)]
        check = await self._check_secrets(memory, ctx, obs.now)
        blockers += check.blockers
        if ctx.spec.output.credentials_secret and check.s3_credentials is None:
            return replace(obs, blockers=tuple(blockers)), None
        try:
            storage = self._storage(memory, ctx, check.s3_credentials)
            obs = replace(obs, storage_uri=storage.url(layout.run_root(ctx.storage_name)))
            ledger, version = await asyncio.to_thread(self._load_ledger, memory, ctx, storage, obs.now)
            obs = replace(obs, ledger=ledger, blockers=tuple(blockers), create_failures=dict(memory.create_failures))
            obs = await _load_samples(memory, ctx, storage, obs)
            obs = replace(obs, probes=await asyncio.to_thread(self._probes, ctx, storage, obs))
            obs = await _load_submission(ctx, storage, obs)
            judge = obs.jobs.get(n.COMPONENT_JUDGE)
            if judge and judge.succeeded:
                method = ctx.spec.judge.method if ctx.spec.judge else DEFAULT_JUDGE_METHOD
                obs = replace(obs, judge=await asyncio.to_thread(s3io.read_estimate, storage, ctx.storage_name, method))
            return obs, version
        except StorageError as exc:
            blockers.append(Blocker("StorageUnavailable", f"{ctx.spec.output.url}: {exc}"))
            return replace(obs, blockers=tuple(blockers)), None

    async def workload(self, ctx: RunContext, obs: Observed) -> Observed:
        """A queued run's Workload, read by a GET in each pass (no watch: the Kueue CRD may be absent)."""
        if obs.queueing is None:
            return obs
        name = queue.workload_name(ctx.name, ctx.uid)
        try:
            body = await asyncio.to_thread(self.kube.read_workload, ctx.namespace, name)
        except NoWorkloadApi as exc:
            message = (
                f"the run is labelled for Kueue queue {obs.queueing.queue} but the cluster has no Kueue Workload API ({exc}); "
                f"install Kueue or remove the label {workload.QUEUE_LABEL}"
            )
            return replace(obs, blockers=(*obs.blockers, Blocker("KueueNotInstalled", message)))
        return replace(obs, workload=workload.parse_workload(body) if body is not None else None)

    async def _check_secrets(self, memory: RunMemory, ctx: RunContext, now: float) -> SecretCheck:
        """Read only when the spec names other Secrets, the last check found one missing, or it is stale."""
        refs = secret_refs(ctx.spec)
        if memory.secrets is not None and memory.secrets_refs == refs and not secrets_due(memory.secrets_checked, now):
            return memory.secrets
        check = await asyncio.to_thread(self.kube.check_secrets, ctx.namespace, ctx.spec)
        complete = not check.blockers
        memory.secrets, memory.secrets_refs, memory.secrets_checked = (check, refs, now) if complete else (None, "", None)
        return check

    def _storage(self, memory: RunMemory, ctx: RunContext, creds: Mapping[str, str] | None) -> Storage:
        """Opened once per output spec and credentials: a rotated Secret gets a new client."""
        key = (ctx.spec.output.model_dump_json(), tuple(sorted((creds or {}).items())))
        if memory.storage is None or memory.storage_key != key:
            memory.storage, memory.storage_key = self.open_storage(ctx.spec.output, creds), key
        return memory.storage

    def _load_ledger(self, memory: RunMemory, ctx: RunContext, storage: Storage, now: float) -> tuple[Ledger, str]:
        """The ledger as this worker last read or wrote it; else the ConfigMap and the archive segments it
        counts, or, when the ConfigMap is missing, a new one (rebuilt from S3 if the run was prepared)."""
        if memory.ledger is not None and memory.ledger_version is not None:
            return dict(memory.ledger), memory.ledger_version
        found = self.kube.read_ledger(ctx.namespace, n.ledger_name(ctx.name), ctx.uid)
        if found is not None:
            data, version = found
            count = segments_of(data)
            ledger, archived = merge(s3io.read_segments(storage, ctx.storage_name, count), decode(data))
            keys = frozenset(data)
        else:
            ledger = s3io.rebuild_ledger(storage, ctx.storage_name, now) if is_prepared(storage, ctx.storage_name) else {}
            parts = split(ledger, {}, batch=1)
            count = 1 if parts.archive else 0
            if parts.archive:
                s3io.write_segment(storage, ctx.storage_name, count, parts.archive)
            created = encode_cluster(parts.cluster, count)
            version, archived, keys = self.kube.create_ledger(manifests.ledger_configmap(ctx, created)), parts.archive, frozenset(created)
            if ledger:
                log.info("run %s/%s: ledger rebuilt from S3 with %d samples", ctx.namespace, ctx.name, len(ledger))
        memory.ledger, memory.ledger_version = dict(ledger), version
        memory.archived, memory.segments, memory.cluster_keys = archived, count, keys
        return ledger, version

    def _probes(self, ctx: RunContext, storage: Storage, obs: Observed) -> dict[tuple[str, int], Probe]:
        """S3 and a labelled list for the attempts `reconcile` cannot decide from the index alone, read together."""
        present = {(p.sample, p.attempt) for p in obs.pods}

        def probe(wanted: tuple[str, int]) -> Probe:
            sample, attempt = wanted
            exists = wanted in present or self.kube.pod_exists(ctx.namespace, n.attempt_selector(ctx.uid, sample, attempt))
            return s3io.probe(storage, ctx.storage_name, sample, attempt, exists)

        wanted = needed_probes(obs)
        return dict(zip(wanted, fan_out(probe, wanted), strict=True))


def secret_refs(spec: GdpvalRunSpec) -> str:
    """The spec's references to Secrets: a change means the Secrets are read again at once."""
    refs = (spec.model.api_key_secret_ref, spec.output.credentials_secret, spec.judge.api_key_secret_ref if spec.judge else None)
    return "|".join(ref.model_dump_json() if ref else "" for ref in refs)


def static_blockers(memory: RunMemory, ctx: RunContext, now: float) -> list[Blocker]:
    """Blockers known without a call: no image to run, or a Job the API refused a moment ago."""
    out = []
    if not ctx.agent_image or not ctx.sandbox_image:
        out.append(Blocker("ImageNotSet", "set spec.images.agent and spec.images.sandbox, or give the operator default images"))
    for component, (when, message) in list(memory.job_errors.items()):
        if job_error_current(when, now):
            out.append(Blocker("JobCreateFailed", f"the {component} Job was refused: {message}"))
    return out


async def _load_samples(memory: RunMemory, ctx: RunContext, storage: Storage, obs: Observed) -> Observed:
    """The manifest's samples once the prepare Job succeeded; read once, they never change."""
    if memory.samples is None:
        prepare = obs.jobs.get(n.COMPONENT_PREPARE)
        if not ((prepare and prepare.succeeded) or obs.status.dataset_revision):
            return obs
        try:
            memory.samples, memory.sectors, memory.revision = await asyncio.to_thread(s3io.load_samples, storage, ctx.storage_name)
        except (NotFound, ValidationError, ValueError) as exc:
            return replace(obs, manifest_error=f"the prepare Job finished but the manifest is unreadable: {exc}")
    return replace(obs, samples=memory.samples, sectors=memory.sectors, dataset_revision=memory.revision)


async def _load_submission(ctx: RunContext, storage: Storage, obs: Observed) -> Observed:
    """The submission, read only after the assemble Job succeeded (its info file is written last)."""
    job = obs.jobs.get(n.COMPONENT_ASSEMBLE)
    if not (job and job.succeeded):
        return obs
    try:
        return replace(obs, submission=await asyncio.to_thread(s3io.read_submission, storage, ctx.storage_name))
    except (NotFound, ValueError, KeyError) as exc:
        return replace(obs, submission_error=f"the assemble Job finished but submission_info.json is unreadable: {exc}")
