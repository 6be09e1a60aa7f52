"""What a run's worker remembers between passes: what never changes once read, and recent refusals.

All of it can be lost (an operator restart starts from nothing): the ledger, pods and S3 hold the
run's state; this only spares repeated reads and keeps refusals visible for a while. The ledger kept
here is the one last read or written, with its resourceVersion: a write made with it fails on any
change by another writer (Conflict), and the next pass reads the ConfigMap again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gdpval.api.v1alpha1 import GdpvalRunStatus
from gdpval.controller.effects.kube import SecretCheck
from gdpval.controller.pure.ledger import Ledger
from gdpval.controller.pure.observe import PodView
from gdpval.storage import Storage

Refusals = dict[str, tuple[float, str]]  # sample or component -> (when, the API's message)


@dataclass
class RunMemory:
    samples: tuple[str, ...] | None = None  # the manifest's sample ids, fixed once prepared
    sectors: dict[str, str] = field(default_factory=dict)  # sample -> sector, with them
    revision: str | None = None
    create_failures: Refusals = field(default_factory=dict)
    job_errors: Refusals = field(default_factory=dict)
    written: GdpvalRunStatus | None = None  # the status last written, to skip unchanged writes
    network_policy: bool = False
    resolved: dict[str, list[str]] | None = None  # the endpoint addresses the NetworkPolicy was built from, for sample pods
    token_secret: bool = False
    storage: Storage | None = None
    storage_key: tuple | None = None  # the output spec and credentials `storage` was opened with
    ledger: Ledger | None = None  # the whole ledger; None: read the ConfigMap (and its segments) on the next pass
    ledger_version: str | None = None
    archived: Ledger = field(default_factory=dict)  # the entries as the archive segments hold them
    segments: int = 0  # archive segments the ConfigMap counts
    cluster_keys: frozenset[str] = frozenset()  # keys of the ConfigMap's data, to remove those that move to S3
    secrets: SecretCheck | None = None  # the last check that found every Secret and key, while fresh
    secrets_refs: str = ""  # the spec's Secret references that check was made for
    secrets_checked: float | None = None
    deleting: set[str] = field(default_factory=set)  # sample pods whose delete call is in flight (not repeated meanwhile)
    went: set[str] = field(default_factory=set)  # pods started ahead given their go, until the watch shows it (see `seen_go`)

    def seen_go(self, pods: tuple[PodView, ...]) -> tuple[PodView, ...]:
        """The pods with the go this worker gave and the watch may not show yet: otherwise the next pass would count
        such a pod as still waiting, outside the window, and give one go too many."""
        if not self.went:
            return pods
        self.went &= {p.name for p in pods if p.ahead}
        return tuple(replace(p, ahead=False) if p.name in self.went else p for p in pods)

    def forget_ledger(self) -> None:
        self.ledger = self.ledger_version = None
        self.archived, self.segments, self.cluster_keys = {}, 0, frozenset()
