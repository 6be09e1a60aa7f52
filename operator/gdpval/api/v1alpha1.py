"""The GdpvalRun resource as typed models: the CRD schema is generated from these classes.

Field names follow Kubernetes conventions (camelCase, `baseURL`); Python code uses snake_case.
Everything the API server can check lives here as schema bounds or CEL rules (`x-kubernetes-*`
keys in `json_schema_extra`), so a bad spec is refused at `kubectl apply` instead of at run time.
"""

from __future__ import annotations

from typing import Any, Literal

from kubernetes.utils import parse_quantity
from pydantic import BaseModel, Field, field_validator
from pydantic.json_schema import JsonDict, JsonValue

from gdpval.sample import SampleCounts
from gdpval.settings import (
    DEFAULT_JUDGE_METHOD,
    AgentSettings,
    DatasetSettings,
    DeliverableSettings,
    JudgeMethod,
    JudgeSettings,
    ModelSettings,
    OutputSettings,
    PromptSettings,
    RunSettings,
    SandboxSettings,
    SelectionSettings,
    SettingsModel,
)

GROUP = "gdpval.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GdpvalRun"
PLURAL = "gdpvalruns"
SINGULAR = "gdpvalrun"
SHORT_NAMES = ["gdpv"]
POOL_KIND = "GdpvalPool"
POOL_PLURAL = "gdpvalpools"
POOL_SINGULAR = "gdpvalpool"
POOL_SHORT_NAMES = ["gdpvp"]
CATEGORIES = ["gdpval"]

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
CleanupPolicy = Literal["Delete", "KeepFailed", "Keep"]


def _cel(rule: str, message: str, **extra: str) -> JsonDict:
    return {"rule": rule, "message": message, **extra}


def _keeps_value(path: str) -> JsonDict:
    """A transition rule: the field keeps its value after creation (one run, one setup)."""
    return _cel("self == oldSelf", f"{path} is immutable: create a new GdpvalRun to change it")


def immutable(path: str) -> JsonDict:
    return {"x-kubernetes-validations": [_keeps_value(path)]}


PRESERVE: JsonDict = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def defaults_of(model: type[BaseModel]) -> JsonDict:
    """The full default object: the API server checks CEL rules against it before nested defaults apply."""
    return _drop_empty(model().model_dump(mode="json", by_alias=True, exclude_none=True))


def pinned(model: type[BaseModel], name: str, *rules: JsonDict) -> JsonDict:
    """Schema extras of a run-settings section: its full default, fixed once the run starts, plus `rules`."""
    validations: list[JsonValue] = [_keeps_value(f"spec.{name}"), *rules]
    return {"default": defaults_of(model), "x-kubernetes-validations": validations}


def _drop_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_empty(v) for k, v in value.items() if v not in ({}, [])}
    return value


class SecretKeyRef(SettingsModel):
    """A key of a Secret in the run's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Secret name.")
    key: str = Field(min_length=1, max_length=253, description="Key inside the Secret.")


class ModelSpec(ModelSettings):
    """The OpenAI-compatible endpoint, how to sample from it, and the Secret holding its API key."""

    api_key_secret_ref: SecretKeyRef | None = Field(default=None, description="Secret key holding the API key; it reaches only the agent container.")


# A cluster cannot read a folder on someone's machine: its dataset is a hub id or an S3 prefix.
CLUSTER_DATASET = _cel(
    "self.id.startsWith('s3://') || self.id.matches('^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$')",
    "dataset.id must be a ModelScope dataset id such as openai-mirror/gdpval, or an s3://bucket/prefix",
)


class SandboxSpec(SandboxSettings):
    """What a sample pod may reach, and its limits: in a pod memoryMiB is the sandbox container's memory limit (its /tmp a
    memory emptyDir of that size), diskMiB the workspace emptyDir's sizeLimit and the sandbox's ephemeral-storage limit,
    cpus its CPU limit; pids is the kubelet's podPidsLimit (node-wide), and strictLimits applies to local runs only."""

    allowed_egress: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"items": PRESERVE},
        description="Extra NetworkPolicy egress rules for network-disabled samples (e.g. a model endpoint known by name).",
    )


class ImagesSpec(SettingsModel):
    """The images of the run's pods (the Helm chart gives the operator defaults)."""

    agent: str | None = Field(default=None, max_length=1024, description="Operator/agent image; default: the operator's.")
    sandbox: str | None = Field(default=None, max_length=1024, description="Sandbox image; default: the operator's.")
    pull_policy: PullPolicy = Field(default="IfNotPresent", description="imagePullPolicy of every container.")


class SamplePolicy(SettingsModel):
    """Retries and scheduling patience of sample pods (the attempt's own deadline is spec.agent.sampleDeadlineSeconds)."""

    retries: int = Field(default=2, ge=0, le=20, description="Attempts after the first when a sample fails.")
    backoff_seconds: int = Field(default=30, ge=0, le=86400, description="Delay before the first retry; doubles per retry.")
    max_backoff_seconds: int = Field(default=600, ge=0, le=86400, description="Longest delay between retries.")
    pending_timeout_seconds: int = Field(
        default=600, ge=30, le=86400, description="A pod still Pending after this long is stuck: it is replaced and counts as a failed attempt."
    )
    outage_hold_seconds: int = Field(
        default=300, ge=1, le=86400, description="A sample pod waits this long for its model endpoint to come back, then ends without spending its attempt."
    )
    start_ahead: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Pods started ahead for the next samples in the queue (references staged, sandbox up, agent waiting): "
        "one enters the window as soon as there is room, without a pod start. With it set every pod waits ready for its go, "
        "and at most `parallelism` pods start at once. Each still serves one sample, and holds its requests while it waits "
        "(a run queued whole in Kueue asks quota for parallelism + startAhead pods). 0: none.",
    )


class S3Credentials(SettingsModel):
    """A Secret with the S3 keys, by reference."""

    name: str = Field(min_length=1, max_length=253, description="Secret with the S3 credentials.")
    access_key_id_key: str = Field(default="AWS_ACCESS_KEY_ID", min_length=1, max_length=253, description="Key of the access key id.")
    secret_access_key_key: str = Field(default="AWS_SECRET_ACCESS_KEY", min_length=1, max_length=253, description="Key of the secret access key.")


S3_URL: JsonDict = {
    "x-kubernetes-validations": [_cel("self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$')", "output.url must look like s3://bucket/prefix")]
}


class OutputSpec(OutputSettings):
    """Where artifacts go (S3 only in a cluster); they outlive the GdpvalRun."""

    url: str = Field(max_length=1024, json_schema_extra=S3_URL, description=OutputSettings.model_fields["url"].description)
    credentials_secret: S3Credentials | None = Field(default=None, description="Without it, pods use ambient credentials.")


Quantity = int | str

# A resource quantity as Kubernetes writes it (500m, 4Gi, 1e3); checked by the API server and again on parsing.
QUANTITY_REGEX = r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
_IS_QUANTITY = f"type({{0}}) == int || {{0}}.matches('{QUANTITY_REGEX}')"
QUANTITY: JsonDict = {"maxLength": 64, "x-kubernetes-validations": [_cel(_IS_QUANTITY.format("self"), "must be a quantity such as 512Mi, 4Gi or 500m")]}
QUANTITIES: JsonDict = {
    "maxProperties": 16,
    "additionalProperties": {"x-kubernetes-int-or-string": True, "maxLength": 64},
    "x-kubernetes-validations": [_cel(f"self.all(k, {_IS_QUANTITY.format('self[k]')})", "values must be quantities such as 512Mi, 4Gi or 500m")],
}


def check_quantity(value: Quantity) -> Quantity:
    """Refuse what the pod's API would refuse later, when the spec is parsed."""
    try:
        parse_quantity(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a quantity such as 512Mi, 4Gi or 500m") from None
    return value


class Resources(SettingsModel):
    """A container's resources, as in a pod spec."""

    requests: dict[str, Quantity] = Field(default_factory=dict, json_schema_extra=QUANTITIES, description="e.g. {cpu: 500m, memory: 1Gi}.")
    limits: dict[str, Quantity] = Field(default_factory=dict, json_schema_extra=QUANTITIES, description="e.g. {memory: 4Gi}.")

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, values: dict[str, Quantity]) -> dict[str, Quantity]:
        return {name: check_quantity(v) for name, v in values.items()}


class ResourcesSpec(SettingsModel):
    """Requests and limits per container, merged key by key over the operator's defaults (chart podDefaults) and those of spec.sandbox."""

    agent: Resources | None = Field(default=None, description="The agent container (the model loop and the upload).")
    sandbox: Resources | None = Field(
        default=None, description="The sandbox container, where the model's commands run; its memory, cpu and ephemeral-storage limits default to spec.sandbox."
    )
    stage: Resources | None = Field(default=None, description="The init container that stages reference files.")
    jobs: Resources | None = Field(
        default=None, description="The prepare and assemble Jobs (the operator's own: requests cpu 200m, memory 256Mi; limits memory 2Gi) and the judge Job."
    )


class VolumeSizes(SettingsModel):
    """sizeLimit of a sample pod's emptyDir volumes; the workspace's is spec.sandbox.diskMiB, the sandbox's /tmp spec.sandbox.memoryMiB."""

    references: Quantity | None = Field(default=None, json_schema_extra=QUANTITY, description="The staged reference files (default 4Gi).")
    scratch: Quantity | None = Field(default=None, json_schema_extra=QUANTITY, description="HOME and /tmp of the stage and agent containers (default 1Gi).")

    @field_validator("references", "scratch")
    @classmethod
    def _quantity(cls, value: Quantity | None) -> Quantity | None:
        return None if value is None else check_quantity(value)


RUNTIME_CLASS = (
    "RuntimeClass of sample pods (not Jobs): e.g. gvisor (runsc, a user-space kernel) or kata (a VM per pod), "
    "for a kernel boundary around the model's commands; the RuntimeClass must exist in the cluster. Default: the chart's podDefaults."
)


POD_DEFAULTS_ENV = "GDPVAL_POD_DEFAULTS"  # the chart's podDefaults as JSON, in the operator's environment


class PodDefaults(SettingsModel):
    """Operator-wide defaults of spec.pod (the chart's podDefaults): a run's own values win, key by key."""

    runtime_class_name: str | None = Field(default=None, max_length=253, description=RUNTIME_CLASS)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    volumes: VolumeSizes = Field(default_factory=VolumeSizes)


class PodOverrides(SettingsModel):
    """Scheduling and metadata applied to every pod of the run (samples and Jobs)."""

    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels, e.g. kueue.x-k8s.io/queue-name.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra annotations.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="nodeSelector of every pod.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, json_schema_extra={"items": PRESERVE}, description="Tolerations of every pod.")
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE, description="Affinity of every pod.")
    priority_class_name: str | None = Field(default=None, max_length=253, description="PriorityClass of every pod.")
    runtime_class_name: str | None = Field(default=None, max_length=253, description=RUNTIME_CLASS)
    service_account_name: str | None = Field(default=None, max_length=253, description="Its token is never mounted.")
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, json_schema_extra={"default": defaults_of(ResourcesSpec)})
    volumes: VolumeSizes = Field(default_factory=VolumeSizes, json_schema_extra={"default": defaults_of(VolumeSizes)})


class JudgeSpec(JudgeSettings):
    """After assembly, a Job judges the run's deliverables (`gdpval judge --method`): rubric points, wins-or-ties against the gold, or both;
    a local estimate, not the official GDPval grade. The gold is mirrored and read by this Job alone."""

    api_key_secret_ref: SecretKeyRef | None = Field(default=None, description="Secret key holding the judge's API key (OPENAI_API_KEY of the judge Job).")


FAILURE_BUDGET_RULE: JsonDict = _cel(
    "type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",
    "failureBudget must be a count >= 0 or a percentage such as '10%'",
)


class GdpvalRunSpec(RunSettings):
    """What to run: the run settings shared with `gdpval run`, plus how to run them on Kubernetes."""

    model: ModelSpec = Field(json_schema_extra=immutable("spec.model"))
    dataset: DatasetSettings = Field(default_factory=DatasetSettings, json_schema_extra=pinned(DatasetSettings, "dataset", CLUSTER_DATASET))
    selection: SelectionSettings = Field(default_factory=SelectionSettings, json_schema_extra=pinned(SelectionSettings, "selection"))
    agent: AgentSettings = Field(default_factory=AgentSettings, json_schema_extra=pinned(AgentSettings, "agent"))
    prompt: PromptSettings = Field(default_factory=PromptSettings, json_schema_extra=pinned(PromptSettings, "prompt"))
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec, json_schema_extra=pinned(SandboxSpec, "sandbox"))
    deliverables: DeliverableSettings = Field(default_factory=DeliverableSettings, json_schema_extra=pinned(DeliverableSettings, "deliverables"))
    output: OutputSpec = Field(json_schema_extra=immutable("spec.output"))
    images: ImagesSpec = Field(default_factory=ImagesSpec, json_schema_extra={"default": defaults_of(ImagesSpec)})
    samples: SamplePolicy = Field(default_factory=SamplePolicy, json_schema_extra={"default": defaults_of(SamplePolicy)})
    failure_budget: int | str = Field(
        default="10%",
        json_schema_extra={"x-kubernetes-validations": [FAILURE_BUDGET_RULE], "maxLength": 4},
        description="Failed samples (count or percentage of all samples) the run tolerates before it fails.",
    )
    deadline_seconds: int | None = Field(default=None, ge=60, description="Wall-clock limit of the whole run.")
    suspend: bool = Field(
        default=False,
        description="Stop the run's active sample pods and start none, with spec.deadlineSeconds paused; unset to resume "
        "(stopped samples start again under the same attempt). A Kueue-style queue sets and unsets it to admit or preempt a whole run.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Delete the GdpvalRun (and with it its pods, Jobs and ledger) this long after it finished; S3 artifacts stay."
    )
    pod: PodOverrides = Field(default_factory=PodOverrides, json_schema_extra={"default": defaults_of(PodOverrides)})
    cleanup_policy: CleanupPolicy = Field(
        default="Delete", description="Which finished pods and Jobs are deleted: Delete (all), KeepFailed, Keep. S3 artifacts are always kept."
    )
    judge: JudgeSpec | None = Field(
        default=None, description="Score the finished run with a judge model before it Succeeds; status.judge records the run-level local estimate."
    )


# Spec fields that configure how a run uses the cluster, not what it runs: `gdpval run` has no flag
# for them, and this says why (a unit test keeps the list and the schema in step).
CLUSTER_ONLY = {
    "model.apiKeySecretRef": "locally the key comes from OPENAI_API_KEY",
    "sandbox.allowedEgress": "NetworkPolicy rules; local sandboxes have --network or none",
    "output.credentialsSecret": "locally the usual AWS environment",
    "images": "local sandboxes run on the host (or an unpacked image)",
    "samples": "pod retries and scheduling; locally a re-run resumes (--retry-failed)",
    "failureBudget": "the operator's stop rule; a local run always finishes its samples",
    "deadlineSeconds": "the run's wall clock in the cluster; locally Ctrl-C and resume",
    "suspend": "stops the run's pods and pauses its deadline; locally Ctrl-C and resume",
    "ttlSecondsAfterFinished": "deletes the finished GdpvalRun; a local run folder is the user's to remove",
    "pod": "scheduling and metadata of pods",
    "cleanupPolicy": "which finished pods and Jobs are kept",
    "judge": "locally `gdpval judge` after the run",
}


class Condition(SettingsModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str = ""
    observed_generation: int = 0


class Tokens(SettingsModel):
    input: int = 0
    output: int = 0
    cost: float | None = Field(
        default=None, description="Money the ended attempts spent at spec.budget.prices (cached input priced as input, an upper bound); empty without prices."
    )


class PairwiseEstimate(SettingsModel):
    """The pairwise judge's totals against the experts' deliverables: a local estimate against the public gold, not OpenAI's grade."""

    samples: int = 0
    wins: int = 0
    ties: int = 0
    losses: int = 0
    inconsistent: int = Field(default=0, description="Pairs whose two orders disagreed: counted as ties.")
    failed: int = Field(default=0, description="Pairs the judge failed on: left out of wins-or-ties, never losses.")
    wins_or_ties: float | None = Field(default=None, description="(wins + ties) over the judged pairs; empty when none was judged.")
    interval_low: float | None = Field(default=None, description="95% bootstrap interval of wins-or-ties over tasks (a task's repeats together).")
    interval_high: float | None = None
    inconsistent_rate: float | None = Field(default=None, description="Share of the pairs judged in both orders whose orders disagreed.")
    failed_rate: float | None = Field(default=None, description="Share of the samples whose judging failed.")
    reliability: str = Field(default="", description="'position-biased: estimate unreliable' when the orders disagreed too often; else empty.")
    results_uri: str = Field(default="", alias="resultsURI", description="The pairwise results.json: per sample, sector, occupation, consistency.")


class JudgeEstimate(SettingsModel):
    """The judge's run-level figures (points over max points of the judged samples): a local estimate, not the official GDPval grade."""

    state: Literal["Succeeded", "Failed"] = Field(description="Succeeded: results.json was written; Failed: the judge Job failed (the run still Succeeds).")
    score: float | None = Field(default=None, description="Points over max points; empty when nothing could be judged.")
    points: float = 0.0
    max_points: float = 0.0
    scored: int = Field(default=0, description="Samples the judge scored.")
    failed: int = Field(default=0, description="Samples the judge model failed on (left out of the sums).")
    results_uri: str = Field(default="", alias="resultsURI", description="The judge's results.json: per sample, per sector and per run.")
    message: str = Field(default="", max_length=2048)
    label: str = Field(default="", description="What the figures are: a local estimate, not the official grade.")
    method: JudgeMethod = Field(default=DEFAULT_JUDGE_METHOD, description="spec.judge.method the figures come from.")
    pairwise: PairwiseEstimate | None = Field(default=None, description="Wins-or-ties against the gold (method pairwise or both).")


# Sectors counted one by one in status (GDPval has 9); any beyond share the OTHER_SECTOR entry.
MAX_SECTORS = 32
OTHER_SECTOR = "(other)"


class SectorCounts(SettingsModel):
    """A sector's samples: all, and those that ended."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0


class GdpvalRunStatus(SettingsModel):
    """Bounded: counts, conditions and URIs, never one entry per sample."""

    observed_generation: int = 0
    state: str = ""
    progress: str = ""
    samples: SampleCounts = Field(default_factory=SampleCounts)
    tokens: Tokens = Field(default_factory=Tokens)
    model_api_errors: int = Field(default=0, alias="modelAPIErrors")
    start_time: str | None = None
    completion_time: str | None = None
    dataset_revision: str | None = None
    storage_uri: str | None = Field(
        default=None, alias="storageURI", max_length=2048, description="The run's folder: run.json, manifest, per-sample attempts, submission."
    )
    submission_uri: str | None = Field(default=None, alias="submissionURI")
    report_uri: str | None = Field(default=None, alias="reportURI", description="The run's HTML report (figures, plots, transcripts), by the assemble Job.")
    submission_ready_rate: float | None = Field(
        default=None, description="Share of samples that left final text or a deliverable file (the benchmark's submission_ready)."
    )
    completed_rate: float | None = Field(default=None, description="Share of samples that ended with a final answer.")
    grading_ready_rate: float | None = Field(
        default=None,
        description="Share of samples whose deliverables all open in the renderer, none empty, no asked type missing (the assemble Job's `gdpval check`).",
    )
    grading_text_only: bool | None = Field(
        default=None,
        description="True when that check rendered text only (the run's sandbox image has no LibreOffice): pages, sheets and slides not counted.",
    )
    started_ahead: int = Field(
        default=0,
        description="Sample pods started and waiting for their go (spec.samples.startAhead): counted in samples.pending, not running, "
        "as they call no model yet.",
    )
    pinned_spec_hash: str | None = Field(default=None, description="Hash of the immutable spec fields the run started with.")
    window: int | None = Field(
        default=None,
        description="Sample pods the run lets call the model at once while rate limits keep it below spec.parallelism (cut on them, "
        "raised without); empty at full parallelism.",
    )
    window_cut: str | None = Field(
        default=None,
        description="When rate limits last cut status.window; attempts whose pods started before it cut it no further (one cut per round of pods).",
    )
    suspended_seconds: int = Field(default=0, description="Time the run spent suspended before its current state; not counted against spec.deadlineSeconds.")
    sectors: dict[str, SectorCounts] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": MAX_SECTORS + 1},
        description=f"Progress per sector; at most {MAX_SECTORS} by name, the rest counted under {OTHER_SECTOR!r}.",
    )
    judge: JudgeEstimate | None = Field(default=None, description="The judge's run-level local estimate (spec.judge), not the official GDPval grade.")
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class GdpvalPoolSpec(SettingsModel):
    """Sample pods kept started for the runs of this namespace: sandbox up, agent imported and waiting, no run's
    files, credentials or endpoint. A run whose images, sandbox limits and pod settings give the same pod (the
    pod's shape, status.shape) claims one instead of creating its own; a claimed pod serves one sample, then goes."""

    size: int = Field(default=0, ge=0, le=500, description="Unclaimed pods kept started; each holds its requests (and its Kueue quota) while it waits.")
    max_starting: int = Field(
        default=0,
        ge=0,
        le=500,
        description="Pool pods starting at once (created, not ready yet) at most; 0: no bound. As maxSurge paces a "
        "Deployment, a bound keeps a refill from taking a small node's CPU from the claimed pods beside it.",
    )
    images: ImagesSpec = Field(default_factory=ImagesSpec, json_schema_extra={"default": defaults_of(ImagesSpec)})
    sandbox: SandboxSettings = Field(
        default_factory=SandboxSettings,
        description="As a run's spec.sandbox: memoryMiB, diskMiB, cpus and network must equal the run's for it to claim a pod.",
    )
    pod: PodOverrides = Field(
        default_factory=PodOverrides,
        json_schema_extra={"default": defaults_of(PodOverrides)},
        description="As a run's spec.pod; its labels and annotations go on the pooled pods "
        "(e.g. kueue.x-k8s.io/queue-name: each pod is admitted as a workload).",
    )


class GdpvalPoolStatus(SettingsModel):
    """What the pool holds now, from its pods."""

    observed_generation: int = 0
    shape: str = Field(default="", description="Hash of the pooled pod's shape; a run's own is in its log when it claims.")
    size: int = 0
    ready: int = Field(default=0, description="Unclaimed pods whose agent waits ready for a claim.")
    starting: int = Field(default=0, description="Unclaimed pods not ready yet (pulling, starting, or held by Kueue's admission).")
    claimed: int = Field(default=0, description="Pods of this pool claimed by runs and still live (each serves one sample).")
    message: str = Field(default="", max_length=2048)
