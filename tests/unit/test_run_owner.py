"""A cluster run's storage is its own: run.json of another GdpvalRun, or with other pinned settings, is refused."""

from __future__ import annotations

import pytest

from gdpval.errors import RunConflict
from gdpval.manifest import RunOwner
from gdpval.runner.prepare import load_and_plan, save_or_resume
from gdpval.settings import leaves
from gdpval.storage import layout
from support import runs

OWNER = RunOwner(namespace="team", name="r1", uid="0f3c9a7e-5b1d")
RUN = layout.cluster_run(OWNER.namespace, OWNER.name, OWNER.uid)


def test_storage_names_are_unique_per_run_and_readable():
    assert RUN == "team.r1-0f3c9a7e"
    others = {layout.cluster_run("other", "r1", OWNER.uid), layout.cluster_run("team", "r1", "77aa0000-0000")}
    assert RUN not in others and len(others) == 2, "another namespace, or the same run recreated (new uid), gets another folder"


@pytest.mark.parametrize("stored", [RunOwner(namespace="other", name="r1", uid="0f3c9a7e-5b1d"), None], ids=["another-run", "no-owner"])
def test_prepare_refuses_run_json_of_another_owner(tmp_path, stored):
    storage, record = runs.owned(tmp_path / "out", RUN, stored)
    with pytest.raises(RunConflict, match="delete that folder .* or create a new GdpvalRun") as refused:
        load_and_plan(storage, RUN, leaves(record.settings), tmp_path / "cache", flags=False, owner=OWNER)
    assert ("GdpvalRun other/r1" if stored else "a run without an owner") in str(refused.value)
    with pytest.raises(RunConflict):
        save_or_resume(storage, record.model_copy(update={"owner": OWNER}), [])


def test_prepare_refuses_other_pinned_settings_of_its_own_run(tmp_path):
    storage, record = runs.owned(tmp_path / "out", RUN, OWNER)
    given = leaves(record.settings.model_copy(update={"agent": record.settings.agent.model_copy(update={"max_steps": 7})}))
    with pytest.raises(RunConflict, match=r"spec.agent.maxSteps 7 \(the run has 250\)"):
        load_and_plan(storage, RUN, given, tmp_path / "cache", flags=False, owner=OWNER)
    resumed, _, was_resumed = save_or_resume(storage, record.model_copy(update={"owner": OWNER}), [])
    assert was_resumed and resumed.owner == OWNER
