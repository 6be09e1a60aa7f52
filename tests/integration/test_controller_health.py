"""The operator's /healthz over real HTTP on 127.0.0.1, and its watchdog."""

from __future__ import annotations

import asyncio

import aiohttp

from gdpval.controller.effects.metrics import Metrics
from gdpval.controller.effects.operator import start_metrics
from gdpval.controller.effects.worker import Controller, Defaults, RunWorker
from gdpval.controller.pure.policy import WATCHDOG_SECONDS
from support.fake_kube import FakeKube


def test_healthz_fails_while_runs_exist_and_no_pass_ends():
    """The watchdog: hung calls stop every pass; the liveness probe must see it and restart the operator."""
    clock = {"now": 1000.0}
    controller = Controller(FakeKube(lambda: clock["now"]), Defaults(), Metrics(), monotonic=lambda: clock["now"])

    async def hung_call(worker: RunWorker) -> float:
        await asyncio.Event().wait()  # an API call that never returns
        return 0.0

    controller.reconcile = hung_call  # type: ignore[method-assign]

    async def scenario() -> list[tuple[int, str]]:
        runner = await start_metrics(controller.metrics, 0, "127.0.0.1", health=controller.health)
        port = runner.addresses[0][1]
        seen = []
        async with aiohttp.ClientSession() as session:

            async def probe() -> None:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    seen.append((response.status, await response.text()))

            clock["now"] += WATCHDOG_SECONDS * 2
            await probe()  # no runs: nothing to be stuck on
            controller.on_run("ADDED", {"metadata": {"namespace": "ns", "name": "r", "uid": "u", "generation": 1}})
            clock["now"] += WATCHDOG_SECONDS - 1
            await probe()
            clock["now"] += 1
            await probe()  # passes that never end (a hung call) for the whole threshold
            controller.last_pass = clock["now"]
            await probe()
        await controller.stop()
        await runner.cleanup()
        return seen

    seen = asyncio.run(scenario())
    assert [status for status, _ in seen] == [200, 200, 503, 200]
    assert "no reconcile pass ended for 600s" in seen[2][1]
