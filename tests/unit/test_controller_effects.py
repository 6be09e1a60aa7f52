"""Sample pod deletions the pass does not wait for: one call in flight per pod, tried again after a failure."""

from __future__ import annotations

from collections.abc import Callable

from gdpval.controller.effects.apply import Effects
from gdpval.controller.effects.memory import RunMemory
from gdpval.controller.pure.decide import Plan
from support.run_context import ctx


class Deleter:
    """The one call these plans make: delete_pod, refused while `refuse` is set."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.refuse = False

    def delete_pod(self, namespace: str, name: str) -> None:
        if self.refuse:
            raise TimeoutError("the API server did not answer")
        self.deleted.append(name)


def test_a_pod_being_deleted_is_not_deleted_again_and_a_failed_delete_is_planned_again():
    kube, pending = Deleter(), []
    spawned: Callable[[Callable[[], None]], None] = pending.append
    effects, memory, run = Effects(kube, spawn=spawned), RunMemory(), ctx()  # type: ignore[arg-type]

    effects.apply(memory, run, Plan({}, delete_pods=["p1", "p2"]), 0.0)
    effects.apply(memory, run, Plan({}, delete_pods=["p1", "p2"]), 1.0)  # the next pass, both calls still in flight
    assert len(pending) == 2 and memory.deleting == {"p1", "p2"} and not kube.deleted

    kube.refuse = True
    pending.pop(0)()  # p1's call fails: logged, forgotten, planned again by the next pass
    kube.refuse = False
    pending.pop(0)()
    assert kube.deleted == ["p2"] and memory.deleting == set()

    effects.apply(memory, run, Plan({}, delete_pods=["p1"]), 2.0)
    pending.pop(0)()
    assert kube.deleted == ["p2", "p1"] and not pending
