"""The types the controller's parts share: what a pass observed, what it plans, and the small records
between them (as jobset's types.go). Pure data: adapters, the decision and the effects all import
this module, and it imports nothing of theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import Field

from gdpval.api.v1alpha1 import MAX_SECTORS, OTHER_SECTOR, GdpvalRunSpec, GdpvalRunStatus, JudgeEstimate, SectorCounts
from gdpval.controller.pure.ledger import Ledger, ResultSummary
from gdpval.controller.pure.observe import JobView, PodView
from gdpval.controller.pure.workload import Queueing, WorkloadView
from gdpval.sample import Tally as RunTally

TERMINAL_STATES = ("Succeeded", "Failed")
RESYNC_SECONDS = 60.0
QUEUE_POLL_SECONDS = 5.0  # a queued run reads its Workload this often (no watch: the Kueue CRD may be absent)


@dataclass(frozen=True)
class Probe:
    """What S3 and a direct GET say about one attempt whose pod ended or vanished."""

    committed: ResultSummary | None = None
    has_files: bool = False
    pod_exists: bool = False


@dataclass(frozen=True)
class Blocker:
    """A problem the CRD cannot catch (missing Secret, no image): nothing new starts until fixed."""

    reason: str
    message: str


@dataclass(frozen=True)
class Submission:
    uri: str
    ready_rate: float | None = None
    completed_rate: float | None = None
    report_uri: str | None = None  # the assemble Job writes the report after the packages; absent if that failed
    grading_ready_rate: float | None = None  # the assemble Job's `gdpval check`, when it checked every package
    grading_text_only: bool | None = None  # that check had no LibreOffice (the run's sandbox image is not the full one)


@dataclass(frozen=True)
class Note:
    """An Event to post on the GdpvalRun."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Observed:
    now: float
    spec: GdpvalRunSpec
    generation: int
    status: GdpvalRunStatus
    ledger: Ledger
    pods: tuple[PodView, ...] = ()
    jobs: Mapping[str, JobView] = field(default_factory=dict)
    samples: tuple[str, ...] | None = None
    sectors: Mapping[str, str] = field(default_factory=dict)  # sample -> sector, from the manifest
    dataset_revision: str | None = None
    manifest_error: str = ""
    storage_uri: str = ""  # the run's folder in its output, once the storage was opened
    blockers: tuple[Blocker, ...] = ()
    probes: Mapping[tuple[str, int], Probe] = field(default_factory=dict)
    create_failures: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    submission: Submission | None = None
    submission_error: str = ""
    judge: JudgeEstimate | None = None  # read once the judge Job succeeded
    queueing: Queueing | None = None  # the run's Kueue labels: one Workload queues the whole run
    workload: WorkloadView | None = None  # read in each pass of a queued run; None before it exists


class Tally(RunTally):
    """A pass's counts, plus why the samples that gave up failed (for the failure-budget message)."""

    failure_reasons: dict[str, int] = Field(default_factory=dict)
    sectors: dict[str, SectorCounts] = Field(default_factory=dict)

    def count_sector(self, sector: str) -> SectorCounts:
        """The sector's counts, created on first use; past `MAX_SECTORS` names they share one entry."""
        if sector not in self.sectors and len(self.sectors) >= MAX_SECTORS:
            sector = OTHER_SECTOR
        return self.sectors.setdefault(sector, SectorCounts())


@dataclass(frozen=True)
class Verdict:
    """Where a phase of the decision leaves the run: its state, and that condition's reason and message."""

    state: str
    reason: str
    message: str = ""

    def but(self, reason: str, message: str) -> Verdict:
        return Verdict(self.state, reason, message)


@dataclass
class Plan:
    ledger: Ledger
    state: str = ""  # these three come from the pass's Verdict (`conclude`)
    reason: str = ""
    message: str = ""
    create_pods: list[tuple[str, int]] = field(default_factory=list)
    ahead: set[tuple[str, int]] = field(default_factory=set)  # of create_pods, those started ahead of their turn
    go_pods: list[tuple[str, float]] = field(default_factory=list)  # (pod, its age) of pods started ahead that now run
    started_ahead: int = 0  # pods started ahead still waiting for their go after this pass (pending, not running)
    delete_pods: list[str] = field(default_factory=list)
    deleting: set[str] = field(default_factory=set, repr=False)  # delete_pods as a set: one check per pod, not a scan
    create_jobs: list[str] = field(default_factory=list)
    delete_jobs: list[str] = field(default_factory=list)
    suspend_jobs: list[tuple[str, bool]] = field(default_factory=list)  # (Job, its spec.suspend) to set
    network_policy: bool = False
    delete_run: bool = False  # the finished run's ttlSecondsAfterFinished is over
    notes: list[Note] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # pods not starting, for the Running condition
    budget: str = ""  # why spec.budget allows no new pod (the BudgetExhausted condition), or ""
    window: int = 0  # sample pods allowed at once (status.window), within parallelism; 0: not decided this pass
    limited: int = 0  # attempts this pass saw end that met rate limits, of pods started since the last cut
    window_cut: float = 0.0  # when this pass cut the window (status.windowCut), 0: it did not
    clean: int = 0  # attempts this pass saw end (committed) that met none
    outage: str = ""  # why the model endpoint's outage allows no new pod (the ModelUnavailable condition), or ""
    tally: Tally = field(default_factory=Tally)
    wake_at: list[float] = field(default_factory=list)
    judge: JudgeEstimate | None = None  # for status.judge
    workload: str = ""  # WORKLOAD_CREATE, _RESIZE, _RELEASE or _FINISH: the queued run's Workload write

    def delete(self, pod: PodView) -> None:
        """Plan a pod's deletion once (a pod being deleted already is left alone)."""
        if not pod.deleting and pod.name not in self.deleting:
            self.deleting.add(pod.name)
            self.delete_pods.append(pod.name)

    def conclude(self, verdict: Verdict) -> None:
        """The one place a pass sets the run's state, reason and message."""
        self.state, self.reason, self.message = verdict.state, verdict.reason, verdict.message

    def requeue_after(self, now: float) -> float:
        soonest = min([t - now for t in self.wake_at] + [RESYNC_SECONDS])
        return max(1.0, soonest)


WORKLOAD_CREATE, WORKLOAD_RESIZE, WORKLOAD_RELEASE, WORKLOAD_FINISH = "create", "resize", "release", "finish"
