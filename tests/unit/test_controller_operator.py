"""The kopf wiring: the settings `configure` uses exist in every kopf allowed; pass slots. (/healthz over
HTTP: tests/integration/test_controller_health.py.)"""

from __future__ import annotations

import asyncio
import tomllib

import kopf
from packaging.requirements import Requirement
from packaging.version import Version

from gdpval.controller.effects.metrics import Metrics
from gdpval.controller.effects.operator import configure
from gdpval.controller.effects.worker import Controller, Defaults, RunWorker
from gdpval.controller.pure import names as n
from infra.paths import REPO_ROOT
from support.fake_kube import FakeKube

# `settings.watching.label_selectors` first appears in kopf 1.45.0: the 1.44.6 tag of nolar/kopf has no
# such attribute, the 1.45.0 wheel has it (both read, not guessed).
KOPF_WITH_LABEL_SELECTORS = Version("1.45.0")


def _kopf_requirement() -> Requirement:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return next(r for r in map(Requirement, project["dependencies"]) if r.name == "kopf")


def test_kopf_floor_has_the_server_side_label_selectors():
    floors = [Version(s.version) for s in _kopf_requirement().specifier if s.operator == ">="]
    assert floors and min(floors) >= KOPF_WITH_LABEL_SELECTORS, f"kopf {_kopf_requirement().specifier} allows versions without label_selectors"


def test_configure_selects_only_our_pods_and_jobs():
    settings = kopf.OperatorSettings()
    configure(settings)
    assert dict(settings.watching.label_selectors) and set(settings.watching.label_selectors.values()) == {n.MANAGED_SELECTOR}
    assert settings.networking.request_timeout


def test_pass_slots_go_to_waiting_runs_in_turn():
    """One slot, three runs always wanting a pass: none gets a second pass while another waits for its first."""
    order: list[str] = []

    async def busy(worker: RunWorker) -> float:
        order.append(worker.key[1])
        await asyncio.sleep(0.01)
        return 0.0

    async def scenario() -> None:
        controller = Controller(FakeKube(lambda: 0.0), Defaults(), Metrics(), concurrency=1)
        controller.reconcile = busy  # type: ignore[method-assign]

        async def worker_loop(worker: RunWorker) -> None:  # as Controller._loop: one pass at a time, again at once
            for _ in range(4):
                await controller.run_pass(worker)

        await asyncio.gather(*(worker_loop(RunWorker(("ns", name))) for name in ("big", "b", "c")))

    asyncio.run(scenario())
    rounds = [order[i : i + 3] for i in range(0, 12, 3)]
    assert all(sorted(r) == ["b", "big", "c"] for r in rounds), order
