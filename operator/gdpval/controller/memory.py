"""What a run's worker remembers between passes: what never changes once read, and recent refusals.

All of it can be lost (an operator restart starts from nothing): the ledger, pods and S3 hold the
run's state; this only spares repeated reads and keeps refusals visible for a while.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gdpval.controller.api import GdpvalRunStatus
from gdpval.storage import Storage

Refusals = dict[str, tuple[float, str]]  # sample or component -> (when, the API's message)


@dataclass
class RunMemory:
    samples: tuple[str, ...] | None = None  # the manifest's sample ids, fixed once prepared
    revision: str | None = None
    create_failures: Refusals = field(default_factory=dict)
    job_errors: Refusals = field(default_factory=dict)
    written: GdpvalRunStatus | None = None  # the status last written, to skip unchanged writes
    network_policy: bool = False
    storage: Storage | None = None
    storage_key: tuple | None = None  # the output spec and credentials `storage` was opened with
