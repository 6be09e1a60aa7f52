"""`gdpval run` end to end: the real CLI, the scripted model over HTTP, bubblewrap sandboxes, storage.

These are the acceptance checks of the core engine: a complete submission for the 12-task sample,
the same result on S3, resume after SIGKILL without re-running committed samples, fault tolerance,
and bad input refused up front with a one-line error.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gdpval.fakemodel.script import parse_inventory
from gdpval.fakemodel.server import start_background
from gdpval.storage import open_storage
from support.cli import GDPVAL, SUBMISSION_COLUMNS, gdpval, run_args
from support.polling import wait_until
from support.processes import interruptible


@pytest.fixture
def dataset(standin_dataset: Path) -> Path:
    """The shared stand-in sample (read-only), under the short name these tests use."""
    return standin_dataset


@pytest.fixture
def model(scripted_model):
    return scripted_model


def submission_rows(root: Path) -> list[dict]:
    return pq.read_table(root / "runs/t/submission/data/train-00000-of-00001.parquet").to_pylist()


def reference_sizes(dataset: Path, row: dict) -> dict[str, int]:
    return {ref.split("/", 2)[2]: (dataset / ref).stat().st_size for ref in row["reference_files"]}


def test_local_run_builds_a_complete_submission(dataset, model, tmp_path):
    done = gdpval(*run_args(dataset, model.base_url, str(tmp_path)))
    assert done.returncode == 0, done.stderr
    table = pq.read_table(tmp_path / "runs/t/submission/data/train-00000-of-00001.parquet")
    assert table.column_names == SUBMISSION_COLUMNS
    assert table.num_rows == 12
    assert str(table.schema.field("deliverable_files").type) == "list<element: string>"
    for row in table.to_pylist():
        assert row["deliverable_files"], row["task_id"]
        for rel in row["deliverable_files"]:
            assert rel.startswith(f"deliverable_files/{row['task_id']}/")
            assert (tmp_path / "runs/t/submission" / rel).is_file()
        inventory = parse_inventory((tmp_path / "runs/t/submission" / row["deliverable_files"][0]).read_text())
        seen = {path.split("/reference_files/", 1)[-1].split("/", 1)[-1]: size for path, size in inventory.items()}
        assert seen == reference_sizes(dataset, row)  # every reference file was visible, whole
    results = pq.read_table(tmp_path / "runs/t/results.parquet").to_pylist()
    assert {r["status"] for r in results} == {"succeeded"} and len(results) == 12


def test_s3_run_matches_the_local_run(dataset, model, tmp_path, s3_env, s3):
    local = tmp_path / "local"
    assert gdpval(*run_args(dataset, model.base_url, str(local))).returncode == 0
    bucket = s3.make_bucket()
    done = gdpval(*run_args(dataset, model.base_url, f"s3://{bucket}/gdpval"))
    assert done.returncode == 0, done.stderr
    remote = open_storage(f"s3://{bucket}/gdpval")
    assert sorted(remote.list("runs/t/submission")) == sorted(p.relative_to(local).as_posix() for p in (local / "runs/t/submission").rglob("*") if p.is_file())
    fetched = tmp_path / "fetched.parquet"
    remote.get_file("runs/t/submission/data/train-00000-of-00001.parquet", fetched)
    assert pq.read_table(fetched).to_pylist() == submission_rows(local)


def scratch(tmp_path: Path) -> dict[str, str]:
    """A TMPDIR of the test's own: the runner's sandboxes live under it, so they can be told apart."""
    (tmp_path / "scratch").mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp_path / "scratch")}


def sandboxes_of(tmp_path: Path) -> list[str]:
    """Live processes (bubblewrap, or an unisolated tool server) started in a workspace under this test's scratch
    folder: their working folder is there (a root runner's bubblewrap names only its view of the workspace).

    Zombies are left out: they are dead, only not yet reaped (this machine's PID 1 reaps slowly or never).
    """
    scratch = str(tmp_path / "scratch") + "/"
    pids = []
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(scratch):
                pids.append(pid)
        except OSError:
            continue
    return [pid for pid in pids if _state(pid) not in ("Z", "X", "")]


def _state(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def committed(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in (root / "runs/t/samples").glob("*/attempt-*/result.json"):
        counts[path.parts[-3]] = counts.get(path.parts[-3], 0) + 1
    return counts


def start_held_run(model, dataset: Path, tmp_path: Path, **popen) -> subprocess.Popen:
    """Start a run with two workers and return once both wait on the model, which holds its replies.

    Every sample takes 2-4 model replies, so a model that lets n replies through and then holds has
    finished at least (n - 6) / 4 samples (each of the two in flight has had at most 3) and at most n / 2.
    """
    proc = subprocess.Popen([GDPVAL, *run_args(dataset, model.base_url, str(tmp_path), "--concurrency", "2")], env=scratch(tmp_path), **popen)
    wait_until(lambda: model.stats()["held"] == 2 or proc.poll() is not None, 120, "both workers waiting on the model", 0.1)
    assert proc.poll() is None, f"the run ended before its model held a reply: {proc.communicate()}"
    return proc


def test_sigkill_then_resume_never_reruns_committed_samples(dataset, tmp_path):
    with start_background(host="127.0.0.1", port=0, hold_after=18) as model:
        proc = start_held_run(model, dataset, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        assert sandboxes_of(tmp_path)  # the check below can see this run's sandboxes
        os.kill(proc.pid, signal.SIGKILL)  # the runner alone: its sandboxes must die with it
        proc.wait()
        wait_until(lambda: not sandboxes_of(tmp_path), 30, "the killed runner's sandboxes to exit", 0.1)
        before = committed(tmp_path)
        assert 3 <= len(before) <= 9
        first = {s: (tmp_path / f"runs/t/samples/{s}/attempt-1/result.json").read_text() for s in before}
        model.release()
        done = gdpval(*run_args(dataset, model.base_url, str(tmp_path)))
    assert done.returncode == 0, done.stderr
    after = committed(tmp_path)
    assert len(after) == 12 and set(after.values()) == {1}
    assert all((tmp_path / f"runs/t/samples/{s}/attempt-1/result.json").read_text() == text for s, text in first.items())
    rows = submission_rows(tmp_path)
    assert sorted(r["task_id"] for r in rows) == sorted(pq.read_table(dataset / "data/train-00000-of-00001.parquet").column("task_id").to_pylist())
    assert all(r["deliverable_files"] for r in rows)


def test_faults_are_survived_and_recorded(dataset, tmp_path):
    faults = {"429": 0.3, "500": 0.3, "malformed": 0.2, "unknown_tool": 0.1}
    with start_background(host="127.0.0.1", port=0, faults=faults, seed=7, retry_after=0.1) as flaky:
        done = gdpval(*run_args(dataset, flaky.base_url, str(tmp_path)))
        stats = flaky.stats()
    results = pq.read_table(tmp_path / "runs/t/results.parquet").to_pylist()
    assert done.returncode == (0 if all(r["status"] == "succeeded" for r in results) else 1), done.stderr
    assert len(results) == 12
    assert sum(r["api_errors"] for r in results) > 0
    for r in results:
        assert r["status"] == "succeeded" or (r["error_kind"] and r["error"]), r
    transcripts = "".join(p.read_text() for p in (tmp_path / "runs/t/samples").rglob("transcript.jsonl"))
    assert "not valid JSON" in transcripts and "unknown tool" in transcripts
    assert sum(stats.get("faults", {}).values()) > 0


@pytest.mark.parametrize(
    "case, fix",
    [
        ("unknown-dataset", "does not exist"),
        ("missing-bucket", "does not exist"),
        ("unreachable-model", "cannot reach the model endpoint"),
        ("bad-key", "rejected the API key"),
        ("unencodable-key", "OPENAI_API_KEY holds a character an HTTP header cannot carry"),
        ("unknown-task", "unknown task id"),
    ],
)
def test_bad_input_fails_early_with_one_line(case, fix, dataset, model, tmp_path, s3, s3_env):
    output, base_url, extra, env = str(tmp_path / "out"), model.base_url, [], {}
    data = dataset
    if case == "unknown-dataset":
        data = tmp_path / "no-such-dataset"
    elif case == "missing-bucket":
        output = "s3://no-such-bucket-gdpval/x"
    elif case == "unreachable-model":
        base_url = "http://127.0.0.1:9/v1"
    elif case == "unknown-task":
        extra = ["--task-id", "not-a-task"]
    elif case == "unencodable-key":
        env = {"OPENAI_API_KEY": "sk-\u201cpasted\u201d"}
    context = start_background(host="127.0.0.1", port=0, api_key="right") if case == "bad-key" else None
    if context:
        base_url, env = context.__enter__().base_url, {"OPENAI_API_KEY": "wrong"}
    try:
        done = gdpval(*run_args(data, base_url, output, *extra), env=env)
    finally:
        if context:
            context.__exit__(None, None, None)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fix.lower() in lines[0].lower(), done.stderr
    assert "pasted" not in done.stderr + done.stdout
    assert not list((tmp_path / "out").rglob("result.json"))


def test_missing_reference_fails_only_its_sample(dataset, model, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    victim = next(p for p in sorted((broken / "reference_files").rglob("*")) if p.is_file())
    victim.unlink()
    done = gdpval(*run_args(broken, model.base_url, str(tmp_path / "out")))
    assert done.returncode == 1, done.stderr  # a sample without a committed success
    results = pq.read_table(tmp_path / "out/runs/t/results.parquet").to_pylist()
    failed = [r for r in results if r["status"] != "succeeded"]
    assert len(failed) == 1 and failed[0]["error_kind"] == "missing_reference"
    assert victim.name in failed[0]["error"]
    assert len(submission_rows(tmp_path / "out")) == 12


@pytest.mark.parametrize(
    "extra, kind",
    [
        (["--extra-body", '{"fake_faults": {"context_length": 1.0}}'], "context_length"),
        (["--max-steps", "2"], "max_steps"),
    ],
)
def test_model_side_endings_are_recorded(extra, kind, dataset, model, tmp_path):
    done = gdpval(*run_args(dataset, model.base_url, str(tmp_path), "--task-id", "83d10b06-26d1-4636-a32c-23f92c57f30b", *extra))
    assert done.returncode == 1, done.stderr
    [result] = pq.read_table(tmp_path / "runs/t/results.parquet").to_pylist()
    assert (result["status"], result["error_kind"]) == ("failed", kind)
    transcript = next((tmp_path / "runs/t/samples").rglob("transcript.jsonl")).read_text()
    assert f'"error_kind": "{kind}"' in transcript


def test_sample_deadline_is_enforced(dataset, tmp_path):
    with start_background(host="127.0.0.1", port=0, latency=1.5) as slow:
        done = gdpval(*run_args(dataset, slow.base_url, str(tmp_path), "--limit", "1", "--sample-deadline", "2"))
    assert done.returncode == 1, done.stderr
    [result] = pq.read_table(tmp_path / "runs/t/results.parquet").to_pylist()
    assert (result["status"], result["error_kind"]) == ("failed", "deadline")
    assert result["duration_s"] < 10


def test_submission_build_rebuilds_the_same_package(dataset, model, tmp_path):
    assert gdpval(*run_args(dataset, model.base_url, str(tmp_path), "--limit", "3")).returncode == 0
    before = submission_rows(tmp_path)
    shutil.rmtree(tmp_path / "runs/t/submission")
    done = gdpval("submission", "build", "--output", str(tmp_path), "--run-name", "t")
    assert done.returncode == 0, done.stderr
    assert submission_rows(tmp_path) == before
    info = json.loads((tmp_path / "runs/t/submission/submission_info.json").read_text())
    assert info["submission_ready"] == 1.0 and "grader" in json.dumps(info).lower()


def test_ctrl_c_stops_promptly_and_resume_completes(dataset, tmp_path):
    with start_background(host="127.0.0.1", port=0, hold_after=14) as model:
        proc = start_held_run(model, dataset, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
        before = committed(tmp_path)
        assert 2 <= len(before) <= 7 and sandboxes_of(tmp_path)
        proc.send_signal(signal.SIGINT)  # two samples are certainly in flight
        # Stopping two hardened sandboxes is bounded (a few seconds each); twice in CI, beside the cluster
        # tier, the runner had not exited after 30 s, which it never failed to do alone: the bound here
        # is the hang detector, not the promptness measure (bench/ has that).
        stderr = proc.communicate(timeout=120)[1]
        assert proc.returncode == 130 and "resume" in stderr
        wait_until(lambda: not sandboxes_of(tmp_path), 30, "every sandbox of the run to exit", 0.1)
        assert committed(tmp_path) == before  # nothing half-done was committed on the way out
        model.release()
        done = gdpval(*run_args(dataset, model.base_url, str(tmp_path)))
    assert done.returncode == 0, done.stderr
    after = committed(tmp_path)
    assert len(after) == 12 and set(after.values()) == {1}
    assert set(before) <= set(after)


def test_hostile_deliverables_are_refused_and_reported(dataset, model, tmp_path):
    done = gdpval(*run_args(dataset, model.base_url, str(tmp_path), "--limit", "2", "--max-deliverable-mb", "1", "--extra-body", '{"fake_hostile": true}'))
    assert done.returncode == 0, done.stderr
    for path in (tmp_path / "runs/t/samples").glob("*/attempt-1/result.json"):
        result = json.loads(path.read_text())
        assert result["status"] == "succeeded"
        assert result["deliverable_files"] == ["reference_inventory.md"]
        reasons = {r["path"]: r["reason"] for r in result["refused_files"]}
        assert set(reasons) == {"passwd-link", "up", "pipe", "huge.bin"}, reasons
        assert "symlink" in reasons["passwd-link"] and "symlink" in reasons["up"]
        assert "fifo" in reasons["pipe"] and "cap" in reasons["huge.bin"]
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".parquet")
    assert b"root:x:0:0" not in stored  # /etc/passwd was never read into storage
