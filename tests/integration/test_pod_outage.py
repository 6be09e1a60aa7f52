"""The sample pod's agent in an outage that outlasts its hold: the real `gdpval sample` command, its
real tool server, the scripted model answering 503 to everything. It must end with
EXIT_MODEL_UNAVAILABLE and commit nothing, so the operator can hold the attempt and run it again
under the same number (the cluster side is in tests/cluster/test_endpoint_outage.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from gdpval import contract
from gdpval.fakemodel.server import start_background
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from infra.minio import free_port
from support import runs
from support.cli import GDPVAL

RUN = "r1"


def test_a_sample_pod_whose_endpoint_stays_down_exits_75_and_commits_nothing(tmp_path):
    storage = LocalStorage(tmp_path / "out")
    (entry,) = runs.entries([runs.task("t1")])
    runs.write_run(storage, RUN, [entry])
    token = tmp_path / "token"
    token.write_text("pod-token")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    port = free_port("127.0.0.1")
    tools = subprocess.Popen(
        [sys.executable, "-m", "gdpval.sandbox.toolserver", "--listen", f"127.0.0.1:{port}", "--workspace", str(workspace), "--token-file", str(token)]
    )
    try:
        with start_background(outage_after=0, outage_seconds=3600.0) as model:
            record = runs.record(RUN)
            settings = record.settings.model_copy(update={"model": record.settings.model.model_copy(update={"base_url": model.base_url})})
            storage.put_text(layout.run_json(RUN), record.model_copy(update={"settings": settings}).dump())
            args = ["sample", "--run-name", RUN, "--output", str(tmp_path / "out"), "--sample", entry.sample.sample_id, "--attempt", "1"]
            env = {**os.environ, contract.TOKEN_ENV: "pod-token", contract.OUTAGE_HOLD_ENV: "1", contract.API_KEY_ENV: "unused"}
            done = subprocess.run(
                [sys.executable, GDPVAL, *args, "--sandbox", f"http://127.0.0.1:{port}"], capture_output=True, text=True, env=env, timeout=600
            )
            refused = model.stats()["statuses"].get(503, 0)
    finally:
        tools.terminate()
        tools.wait(timeout=30)
    assert done.returncode == contract.EXIT_MODEL_UNAVAILABLE, done.stderr[-2000:]
    assert "ModelUnavailable" in done.stderr and refused >= 5  # the pod's breaker opened before it gave up
    assert not storage.exists(layout.result(RUN, entry.sample.sample_id, 1))
    assert not list((tmp_path / "out").rglob("transcript*"))  # nothing of the attempt was uploaded
