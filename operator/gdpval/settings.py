"""A run's settings: the one definition behind `gdpval run`'s flags, the GdpvalRun spec and run.json.

On the wire (the CRD, run.json, the prepare Job's input) fields are Kubernetes-style camelCase; in
Python they are snake_case. A field's description is both its flag's help and its `kubectl explain`
text, and its bounds are checked the same way everywhere. `Flag` metadata names a field's
command-line flag when it differs from `--<field-name>`.

This module is the bottom layer: it imports nothing else of the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Formatter
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

DEFAULT_DATASET = "openai-mirror/gdpval"
MIB = 1024 * 1024
HTTP_URL = r"^https?://[^\s/]+"
# Sections fixed when a run starts: a resume or a spec change may not alter them.
PINNED_SECTIONS = ("model", "dataset", "selection", "agent", "prompt", "sandbox", "deliverables")
# Within them, where to reach the model may change on resume (the same model, served elsewhere); the
# dataset revision is checked against the one the run resolved, not the one it asked for.
# The sandbox runtime is a name ("auto") that can resolve to another root later: run.json pins the root
# it resolved to instead (RunRecord.runtime, checked on resume).
# Streaming is how replies travel, not what they say: it may change too.
UNPINNED = (("model", "base_url"), ("model", "stream"), ("dataset", "revision"), ("sandbox", "runtime"))


def tmpfs_sizes(memory: int) -> tuple[int, int]:
    """The sandbox's /tmp and /dev/shm for a sandbox of `memory` (any unit): memory-backed, so half and a
    quarter of it, which filled still leave a quarter to the processes and the tool server."""
    return memory // 2, memory // 4


# Settings of `gdpval run` alone, and why pods have no use for them. They are never written: not in the
# GdpvalRun schema, not in run.json (which records what they resolved to instead).
LOCAL_ONLY = {("sandbox", "runtime"): "pods run their sandbox image (spec.images.sandbox); run.json records the root used (RunRecord.runtime)"}


@dataclass(frozen=True)
class Flag:
    """How a field appears on the command line: its flag names, and whether the value is JSON."""

    names: tuple[str, ...]
    json: bool = False
    text_file: bool = False  # "@FILE" on the command line reads the value from a file


class SettingsModel(BaseModel):
    """camelCase aliases on the wire; unknown keys ignored so newer files stay readable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ModelSettings(SettingsModel):
    """The OpenAI-compatible endpoint and how to sample from it. The API key is never a setting."""

    name: Annotated[str, Flag(("--model",))] = Field(min_length=1, max_length=256, description="Model name sent to the endpoint.")
    base_url: Annotated[str | None, Flag(("--base-url",))] = Field(
        default=None,
        alias="baseURL",
        max_length=2048,
        pattern=HTTP_URL,
        description="OpenAI-compatible base URL (http:// or https://); empty means OPENAI_BASE_URL or the OpenAI API.",
    )
    temperature: float | None = Field(default=None, ge=0, le=2, description="Sampling temperature; empty leaves the endpoint's default.")
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000, description="Most tokens of each model response (see --token-limit-param).")
    token_limit_param: Annotated[Literal["max_tokens", "max_completion_tokens"], Flag(("--token-limit-param",))] = Field(
        default="max_tokens",
        description="Request field that carries --max-tokens: max_tokens, or max_completion_tokens (OpenAI's reasoning models refuse max_tokens).",
    )
    reasoning_effort: str | None = Field(
        default=None, max_length=32, pattern=r"^[a-z]+$", description="reasoning_effort sent with each request (e.g. low, medium, high); empty sends none."
    )
    stream: Annotated[bool, Flag(("--stream/--no-stream",))] = Field(
        default=False, description="Ask for streamed replies and assemble them (for gateways that only stream)."
    )
    extra_body: Annotated[dict[str, Any] | None, Flag(("--extra-body",), json=True)] = Field(
        default=None, description='JSON object merged into every request body, e.g. {"top_p": 0.9}.'
    )


class DatasetSettings(SettingsModel):
    """Where the GDPval tasks come from; the run pins the revision it resolved."""

    id: Annotated[str, Flag(("--dataset",))] = Field(
        default=DEFAULT_DATASET,
        min_length=1,
        max_length=1024,
        description="ModelScope dataset id, an s3://bucket/prefix in the Hugging Face layout, or (local runs) a folder in that layout.",
    )
    revision: str | None = Field(default=None, max_length=256, description="Dataset revision to pin; empty means the latest (a resumed run keeps its own).")
    split: str = Field(default="train", min_length=1, max_length=64, description="Dataset split.")
    missing_references: Annotated[Literal["fail", "skip"], Flag(("--missing-references",))] = Field(
        default="fail",
        description="A task whose reference files cannot be fetched: fail its sample, or run it without them and record a warning.",
    )


ShortText = Annotated[str, Field(min_length=1, max_length=256)]


class SelectionSettings(SettingsModel):
    """Which tasks run, and how many samples each."""

    limit: int | None = Field(default=None, ge=1, description="Run at most this many tasks (the dataset's first ones).")
    task_ids: Annotated[list[ShortText], Flag(("--task-id",))] = Field(
        default_factory=list, max_length=1000, json_schema_extra={"x-kubernetes-list-type": "set"}, description="Only these task ids."
    )
    sectors: Annotated[list[ShortText], Flag(("--sector",))] = Field(
        default_factory=list, max_length=100, json_schema_extra={"x-kubernetes-list-type": "set"}, description="Only tasks of these sectors."
    )
    occupations: Annotated[list[ShortText], Flag(("--occupation",))] = Field(
        default_factory=list, max_length=1000, json_schema_extra={"x-kubernetes-list-type": "set"}, description="Only tasks of these occupations."
    )
    repeats: int = Field(default=1, ge=1, le=100, description="Samples per task (one submission package per repeat).")


class AgentSettings(SettingsModel):
    """The model loop of one sample attempt."""

    max_steps: int = Field(default=250, ge=1, le=10000, description="Model turns before a sample fails.")
    command_timeout_seconds: Annotated[int, Flag(("--command-timeout",))] = Field(
        default=180, ge=1, le=86400, description="Seconds before a tool command is killed."
    )
    max_command_timeout_seconds: Annotated[int, Flag(("--max-command-timeout",))] = Field(
        default=600, ge=1, le=86400, description="Longest timeout a model may ask for in a tool call's `timeout` argument."
    )
    sample_deadline_seconds: Annotated[int | None, Flag(("--sample-deadline",))] = Field(
        default=7200,
        ge=1,
        le=7 * 86400,
        description="Wall-clock seconds of one sample attempt (model calls and tools); on Kubernetes the pod gets a few minutes more to upload.",
    )
    context: Annotated[Literal["none", "elide"], Flag(("--context",))] = Field(
        default="none",
        description="Context policy: 'none' sends the whole conversation (as the benchmark does); 'elide' drops old tool output past --context-budget.",
    )
    context_budget_tokens: Annotated[int, Flag(("--context-budget",))] = Field(
        default=100_000,
        ge=1000,
        le=10_000_000,
        description="With --context elide: estimated tokens the conversation is kept within by eliding old tool output.",
    )
    view_images: Annotated[bool, Flag(("--view-images/--no-view-images",))] = Field(
        default=False,
        description="Offer a `view` tool that shows the model pictures of a file's first pages, slides or image (for vision models; "
        "the paper counts such scaffolding as a gain, so it is off by default as in the benchmark).",
    )


class PromptSettings(SettingsModel):
    """What the model is told and how a sample ends: the conventions of a harness, to reproduce another one's."""

    system: Annotated[str, Flag(("--system-prompt",), text_file=True)] = Field(
        default="default",
        max_length=65536,
        description="System prompt: 'default' (ours), 'none', or the text itself (on the command line, @FILE reads it from a file).",
    )
    template: Annotated[str, Flag(("--prompt-template",), text_file=True)] = Field(
        default="default",
        max_length=65536,
        description="User message: 'default', or a template with {prompt}, {references}, {workspace} and {deliverables} (@FILE reads a file).",
    )
    finish: Annotated[Literal["answer", "submit"], Flag(("--finish",))] = Field(
        default="answer",
        description="How a sample ends: 'answer', a reply that calls no tool, or 'submit', a submit(answer) tool whose answer is the deliverable text.",
    )

    PLACEHOLDERS: ClassVar[tuple[str, ...]] = ("prompt", "references", "workspace", "deliverables")

    @field_validator("template")
    @classmethod
    def _fillable(cls, template: str) -> str:
        """A template that cannot be filled is refused with the settings, before any sample starts.

        Placeholders are bare names: with no format spec or conversion, filling one cannot fail later.
        """
        if template == "default":
            return template
        try:
            fields = [(name, spec, conversion) for _, name, spec, conversion in Formatter().parse(template) if name is not None]
        except ValueError as exc:
            raise ValueError(f"not a valid template ({exc}); write {{{{ and }}}} for literal braces") from None
        for name, spec, conversion in fields:
            if name not in cls.PLACEHOLDERS or spec or conversion:
                written = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
                allowed = ", ".join(f"{{{known}}}" for known in cls.PLACEHOLDERS)
                raise ValueError(f"unknown placeholder {{{written}}}; a template may use {allowed}, and {{{{ }}}} for literal braces")
        if "prompt" not in (name for name, _, _ in fields):
            raise ValueError("the template has no {prompt}, so the model would never see the task")
        return template


class SandboxSettings(SettingsModel):
    """What a sample's sandbox may reach, and the resources it may use."""

    network: Annotated[bool, Flag(("--network/--no-network",))] = Field(
        default=False, description="Let sandboxes reach the network (on Kubernetes: beyond the model and S3 endpoints)."
    )
    memory_mib: Annotated[int, Flag(("--sandbox-memory-mb",))] = Field(
        default=4096, ge=256, le=1_048_576, alias="memoryMiB", description="Memory of one sample's sandbox in MiB, its /tmp (a tmpfs) included."
    )
    pids: Annotated[int, Flag(("--sandbox-pids",))] = Field(
        default=1024, ge=32, le=1_000_000, description="Most processes and threads in one sample's sandbox."
    )
    disk_mib: Annotated[int, Flag(("--sandbox-disk-mb",))] = Field(
        default=10240, ge=64, le=10_485_760, alias="diskMiB", description="Disk of one sample's /workspace in MiB (its /tmp counts against memory instead)."
    )
    cpus: Annotated[float | None, Flag(("--sandbox-cpus",))] = Field(
        default=None, ge=0.1, le=1024, description="CPU quota of one sample's sandbox in cores; empty means no quota."
    )
    strict_limits: Annotated[bool, Flag(("--strict-limits/--no-strict-limits",))] = Field(
        default=False, description="Refuse to run when a sandbox limit cannot be enforced on this machine, instead of warning at start."
    )
    runtime: Annotated[SkipJsonSchema[str], Flag(("--sandbox-runtime",))] = Field(
        default="auto",
        exclude=True,
        min_length=1,
        max_length=4096,
        description="Root of local sandboxes: 'auto' (the full sandbox image once `gdpval runtime build` unpacked it, else host), 'full', 'host', or a folder.",
    )


class DeliverableSettings(SettingsModel):
    """Caps on the files collected from a sample's deliverable_files/ folder."""

    max_file_mib: Annotated[int, Flag(("--max-deliverable-mb",))] = Field(
        default=200, ge=1, le=100_000, alias="maxFileMiB", description="Largest deliverable file kept, in MiB; larger ones are refused and listed."
    )
    max_files: Annotated[int, Flag(("--max-deliverable-files",))] = Field(default=200, ge=1, le=100_000, description="Most deliverable files kept per sample.")
    max_total_mib: Annotated[int, Flag(("--max-deliverable-total-mb",))] = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        alias="maxTotalMiB",
        description="Most deliverable bytes kept per sample in MiB, by apparent size (sparse files count whole); files past it are refused and listed.",
    )

    @property
    def max_file_bytes(self) -> int:
        return self.max_file_mib * MIB

    @property
    def max_total_bytes(self) -> int:
        return self.max_total_mib * MIB


class OutputSettings(SettingsModel):
    """Where artifacts go; they outlive the run."""

    url: Annotated[str, Flag(("--output", "-o"))] = Field(
        default="./gdpval-output", min_length=1, max_length=1024, description="Where artifacts go: s3://bucket/prefix, or (local runs) a folder."
    )
    endpoint: Annotated[str | None, Flag(("--s3-endpoint",))] = Field(
        default=None,
        max_length=2048,
        pattern=HTTP_URL,
        description="S3-compatible endpoint URL (path-style addressing); empty means AWS_ENDPOINT_URL or AWS S3.",
    )
    region: Annotated[str | None, Flag(("--s3-region",))] = Field(default=None, max_length=64, description="S3 region; empty means AWS_REGION or us-east-1.")


JudgeMethod = Literal["rubric", "pairwise", "both"]
DEFAULT_JUDGE_METHOD: JudgeMethod = "rubric"  # the one default: CLI, CRD, status and the estimate reader take it from here


# Over this share of judged pairs whose two orders disagree, a pairwise estimate is labelled position-biased.
MAX_INCONSISTENT = 0.3


class JudgeSettings(SettingsModel):
    """The local judge (`gdpval judge`): rubric points and/or wins-or-ties against the gold, a local estimate, not the official GDPval grade."""

    model: str = Field(min_length=1, max_length=256, description="Model name of the judge.")
    base_url: str = Field(
        alias="baseURL", max_length=2048, pattern=HTTP_URL, description="OpenAI-compatible base URL of the judge model (http:// or https://)."
    )
    concurrency: int = Field(default=4, ge=1, le=64, description="Samples judged at once.")
    tries: int = Field(default=3, ge=1, le=10, description="Tries per sample on server errors and malformed replies; then the sample is a judge failure.")
    method: JudgeMethod = Field(
        default=DEFAULT_JUDGE_METHOD,
        description="rubric: points against each task's rubric; pairwise: wins-or-ties against the experts' deliverables (the gold), "
        "both orders, a local estimate against the public gold, not OpenAI's grade; both.",
    )
    max_inconsistency: float = Field(
        default=MAX_INCONSISTENT,
        ge=0,
        le=1,
        description="Pairwise: over this share of judged pairs whose two orders disagree, the estimate is labelled 'position-biased: estimate unreliable'.",
    )


class PriceSettings(SettingsModel):
    """What the endpoint charges, in money per million tokens (any currency; results use the same one)."""

    input: Annotated[float | None, Flag(("--price-input",))] = Field(default=None, ge=0, le=1_000_000, description="Price per million input tokens.")
    cached_input: Annotated[float | None, Flag(("--price-cached-input",))] = Field(
        default=None, ge=0, le=1_000_000, description="Price per million cached input tokens; empty means the input price."
    )
    output: Annotated[float | None, Flag(("--price-output",))] = Field(default=None, ge=0, le=1_000_000, description="Price per million output tokens.")

    @property
    def known(self) -> bool:
        """Costs can be computed: both the input and the output price are given."""
        return self.input is not None and self.output is not None

    def cost(self, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float | None:
        """The money spent on these tokens (`input_tokens` includes the cached ones); None without prices."""
        if self.input is None or self.output is None:
            return None
        cached = min(cached_input_tokens, input_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        return ((input_tokens - cached) * self.input + cached * cached_price + output_tokens * self.output) / 1_000_000


class BudgetSettings(SettingsModel):
    """Spending limits, checked before every model call; unlike the pinned sections they may change on resume."""

    run_tokens: Annotated[int | None, Flag(("--run-tokens",))] = Field(
        default=None, ge=1, description="Tokens (input plus output) the whole run may spend; then no sample starts and running ones end with reason budget."
    )
    sample_tokens: Annotated[int | None, Flag(("--sample-tokens",))] = Field(
        default=None, ge=1, description="Tokens one sample attempt may spend; then it ends with reason sample_budget."
    )
    run_cost: Annotated[float | None, Flag(("--run-cost",))] = Field(
        default=None, gt=0, description="Money the whole run may spend (needs --price-input and --price-output)."
    )
    sample_cost: Annotated[float | None, Flag(("--sample-cost",))] = Field(
        default=None, gt=0, description="Money one sample attempt may spend (needs --price-input and --price-output)."
    )
    prices: PriceSettings = Field(default_factory=PriceSettings)

    @model_validator(mode="after")
    def _priced(self) -> BudgetSettings:
        """A money limit without prices could never be checked: refused with the settings."""
        if (self.run_cost is not None or self.sample_cost is not None) and not self.prices.known:
            raise ValueError("a cost limit needs the input and output prices (--price-input, --price-output)")
        return self


class RunSettings(SettingsModel):
    """Everything that configures a run, on one machine or on Kubernetes."""

    model: ModelSettings
    dataset: DatasetSettings = Field(default_factory=DatasetSettings)
    selection: SelectionSettings = Field(default_factory=SelectionSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    prompt: PromptSettings = Field(default_factory=PromptSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    deliverables: DeliverableSettings = Field(default_factory=DeliverableSettings)
    output: OutputSettings = Field(default_factory=OutputSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    parallelism: Annotated[int, Flag(("--parallelism", "--concurrency"))] = Field(
        default=4, ge=1, le=10000, description="Samples running at once (may change while a run goes on)."
    )

    def wire(self) -> dict[str, Any]:
        """The camelCase JSON object stored in run.json and handed to the prepare Job."""
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def of(cls, spec: BaseModel) -> RunSettings:
        """The run settings inside a larger model (a GdpvalRun spec): cluster-only fields drop out."""
        return cls.model_validate(spec.model_dump(mode="json", by_alias=True))


# --- the settings as command-line flags (pure; the CLI turns these into options) ----------------

Path_ = tuple[str, ...]


@dataclass(frozen=True)
class FlagSpec:
    """One leaf setting as a flag: where it lives in RunSettings and how the CLI declares it."""

    path: Path_
    names: tuple[str, ...]
    kind: type  # str, int, float or bool; JSON flags take a str
    default: Any
    help: str
    multiple: bool = False
    json: bool = False
    text_file: bool = False
    choices: tuple[str, ...] = ()

    @property
    def param(self) -> str:
        """A unique Python identifier for the option (typer names parameters after it)."""
        return "__".join(self.path)

    @property
    def flag(self) -> str:
        return self.names[0].split("/")[0]


def _submodel(annotation: Any) -> type[SettingsModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, SettingsModel) else None


def _leaf_kind(annotation: Any) -> tuple[type, bool, tuple[str, ...]]:
    """(scalar type, is a list, allowed values) of `T`, `T | None`, `list[T]` or `Literal[...]`."""
    origin = get_origin(annotation)
    args = [a for a in get_args(annotation) if a is not type(None)]
    if origin is Literal:
        return str, False, tuple(str(a) for a in args)
    if origin is list:
        return _leaf_kind(args[0])[0], True, ()
    if args and annotation not in (str, int, float, bool):
        return _leaf_kind(args[0])
    scalar = origin or annotation
    return (scalar if scalar in (str, int, float, bool) else str), False, ()


def flag_specs(model: type[SettingsModel] = RunSettings, prefix: Path_ = ()) -> list[FlagSpec]:
    """Every leaf field of `model` as a flag, in declaration order."""
    specs: list[FlagSpec] = []
    for name, info in model.model_fields.items():
        sub = _submodel(info.annotation)
        if sub is not None:
            specs += flag_specs(sub, (*prefix, name))
            continue
        flag = next((m for m in info.metadata if isinstance(m, Flag)), Flag((f"--{name.replace('_', '-')}",)))
        kind, multiple, choices = _leaf_kind(info.annotation)
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        specs.append(
            FlagSpec(
                (*prefix, name),
                flag.names,
                str if flag.json else kind,
                default or None if multiple else default,
                info.description or "",
                multiple,
                flag.json,
                flag.text_file,
                choices,
            )
        )
    return specs


def wire_path(path: Path_, model: type[SettingsModel] = RunSettings) -> Path_:
    """The camelCase path of a field (as in the CRD and run.json)."""
    info = model.model_fields[path[0]]
    head = info.alias or path[0]
    sub = _submodel(info.annotation)
    return (head, *wire_path(path[1:], sub)) if len(path) > 1 and sub else (head,)


def nest(values: dict[Path_, Any]) -> dict[str, Any]:
    """{("agent", "max_steps"): 9} -> {"agent": {"max_steps": 9}}."""
    out: dict[str, Any] = {}
    for path, value in values.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def leaves(settings: BaseModel, prefix: Path_ = ()) -> dict[Path_, Any]:
    """The leaf values of a settings object by Python path (the inverse of `nest`)."""
    out: dict[Path_, Any] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SettingsModel):
            out |= leaves(value, (*prefix, name))
        else:
            out[(*prefix, name)] = value
    return out


@dataclass(frozen=True)
class Change:
    path: Path_
    stored: Any
    given: Any


def pinned_changes(stored: RunSettings, wanted: RunSettings) -> list[Change]:
    """Pinned settings that differ between a stored run and what is asked now."""
    old, new = leaves(stored), leaves(wanted)
    return [Change(path, old[path], new[path]) for path in old if path[0] in PINNED_SECTIONS and path not in UNPINNED and old[path] != new[path]]


def resume_settings(stored: RunSettings, given: dict[Path_, Any]) -> tuple[RunSettings, list[Change]]:
    """A resumed run keeps its stored settings; explicitly given ones override, and pinned changes are reported."""
    merged = stored.model_dump()
    for path, value in given.items():
        node = merged
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    wanted = RunSettings.model_validate(merged)
    return wanted, pinned_changes(stored, wanted)
